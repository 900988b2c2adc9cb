"""Text from outside never reaches the terminal as escape sequences: the dashboard on a real
pseudo-terminal, fed the same hostile text through every data source it shows (a plans file's
names, a run log's names, Prometheus labels, a training config's keys and values), writes each
one's characters visibly (``\\x1b``) and never the sequences themselves: no clipboard write
(OSC 52), no window title, no clear-screen, no 8-bit CSI, and rich markup in data is shown,
never parsed (it would raise)."""

from __future__ import annotations

import json
import os
import select
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "probe"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "devices"))
from fake_run_logs import run_record, step_record, write_log
from prom_fixtures import FakePrometheus, dcgm_labels, series
from pty_dashboard import spawn_dashboard

from trainmem.core.plan import Plan
from trainmem.sources.plan_files import NamedPlan, PlanSet, to_toml

# OSC 52 writes the clipboard ("MARKER" in base64), OSC 0 the window title, CSI 2J clears the
# screen, U+009B is the 8-bit CSI; "[/]" is rich markup that closes nothing.
HOSTILE = "a\x1b]52;c;TUFSS0VS\x07b\x1b]0;PWNED\x07c\x1b[2JCLEARED\u009b31md[/]e"
FORBIDDEN = (b"\x1b]52;c;TUFSS0VS", b"\x1b]0;PWNED", b"\x1b[2JCLEARED", "\u009b31m".encode())
F3, F4 = b"\x1b[13~", b"\x1b[14~"


def _dashboard(tmp_path: Path, args: list[str], keys: list[bytes], seconds: float) -> bytes:
    """Everything the dashboard wrote to a 120x40 terminal while ``keys`` were pressed (one
    a second, after start-up)."""
    proc, master = spawn_dashboard(tmp_path, ["--interval", "0.3", *args], size=(120, 40))
    out = bytearray()
    start = time.monotonic()
    pending = list(keys)
    try:
        while time.monotonic() - start < seconds:
            ready, _, _ = select.select([master], [], [], 0.05)
            if ready:
                try:
                    out += os.read(master, 1 << 16)
                except OSError:
                    break
            elapsed = time.monotonic() - start
            if pending and elapsed > 3.0 + 1.5 * (len(keys) - len(pending)):
                os.write(master, pending.pop(0))
    finally:
        proc.kill()
        proc.wait()
        os.close(master)
    return bytes(out)


def _assert_safe(out: bytes, *, shown: bool = True) -> None:
    for sequence in FORBIDDEN:
        assert sequence not in out, f"{sequence!r} reached the terminal"
    assert b"Traceback" not in out and b"MarkupError" not in out
    if shown:  # the text itself is on screen, written out
        assert b"52;c;TUFSS0VS" in out and b"PWNED" in out


@pytest.fixture
def prometheus() -> Iterator[FakePrometheus]:
    fake = FakePrometheus()
    labels = {**dcgm_labels("node-1", 0, None), "Hostname": HOSTILE, "modelName": HOSTILE}
    fake.behaviour.gpu = [
        series("DCGM_FI_DEV_FB_USED", labels, 1000),
        series("DCGM_FI_DEV_FB_FREE", labels, 80000),
    ]
    try:
        yield fake
    finally:
        fake.close()


def test_plan_names_from_a_plans_file(tmp_path: Path) -> None:
    plans = tmp_path / "plans.toml"
    named = (NamedPlan(HOSTILE, Plan(model="7B")), NamedPlan("second", Plan(model="1B")))
    plans.write_text(to_toml(PlanSet(named)))
    _assert_safe(_dashboard(tmp_path, ["--compare", str(plans)], [F3], 6.0))


def test_names_from_a_run_log(tmp_path: Path) -> None:
    record = run_record(gpu=HOSTILE)
    record["host"] = HOSTILE
    record["model"]["name"] = HOSTILE
    log = write_log(tmp_path / "run.rank0.jsonl", record, [step_record(1), step_record(2)])
    _assert_safe(_dashboard(tmp_path, ["--model", "3B", "--run-log", str(log)], [F4], 7.0))


def test_labels_from_prometheus(tmp_path: Path, prometheus: FakePrometheus) -> None:
    out = _dashboard(tmp_path, ["--model", "3B", "--prometheus", prometheus.url], [F4], 7.0)
    _assert_safe(out)


def test_keys_and_values_from_a_training_config(tmp_path: Path) -> None:
    config = tmp_path / "train.yaml"
    config.write_text(
        json.dumps(  # YAML is a superset of JSON: the escapes stay exact
            {
                "base_model": f"org/{HOSTILE}",  # shown in the Model field and its error
                "adapter": "lora",
                "sequence_len": 512,
                "lora_target_linear": True,
            }
        )
    )
    _assert_safe(_dashboard(tmp_path, ["--from", str(config)], [], 5.0))
