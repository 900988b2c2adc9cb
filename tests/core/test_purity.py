"""The estimator core imports no UI or NVML module (checked in a fresh interpreter)."""

import json
import subprocess
import sys


def test_core_imports_no_ui_or_nvml():
    code = (
        "import sys, json; import trainmem.core, trainmem.core.whatif; "
        "print(json.dumps(sorted(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = json.loads(out.stdout)
    forbidden = [m for m in loaded if m.split(".")[0] in {"textual", "rich", "pynvml", "psutil"}]
    assert forbidden == []


def test_plan_json_path_imports_no_textual():
    code = (
        "import sys, json, contextlib, io\n"
        "from trainmem.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(['plan', '--model', '1B', '--device', '24GB', '--json'])\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert not [m for m in loaded if m.split(".")[0] == "textual"]
