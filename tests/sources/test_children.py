"""trainmem's own child processes (the traced step, the chat template's sandbox) import
nothing from the folder the user runs them in."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from trainmem.sources.children import module_command


def test_a_module_in_the_current_folder_is_not_imported(tmp_path: Path) -> None:
    # a cloned training repository's json.py (or peft.py, torch.py) shadowed the real one:
    # `python -m` puts the current folder first on the child's path
    marker = tmp_path / "ran"
    (tmp_path / "json.py").write_text(f"open({str(marker)!r}, 'w').close()\n")

    def run(command: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            command, input="{}", cwd=tmp_path, capture_output=True, text=True, check=False
        )

    plain = run([sys.executable, "-m", "json.tool"])
    assert marker.exists() and plain.returncode != 0  # the shadow ran, and broke the child
    marker.unlink()
    done = run(module_command("json.tool"))
    assert done.returncode == 0 and done.stdout.strip() == "{}" and not marker.exists()
