"""Write a config for a test and read it back as --from would."""

from __future__ import annotations

import textwrap
from pathlib import Path

from trainmem.sources.configs import ConfigPlan, read_configs


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    return path


def read(folder: Path, name: str, text: str) -> ConfigPlan:
    return read_configs([write(folder, name, text)])
