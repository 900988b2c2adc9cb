"""This machine's calibrations, one per GPU model, in the state folder (calibration.json).

Format 1::

    {"format": 1, "gpus": {"NVIDIA H100 80GB HBM3": {"context_bytes": 536870912,
      "reserve_fraction": 0.091, "run": "run.rank0.jsonl", "steps": 118, "cuda": "12.8",
      "torch": "2.13.0"}}}

Written atomically (plan_files.atomic_write). A file that cannot be read or parsed raises
``CalibrationFileError`` (one line) and is never written over: saving refuses until the user
moves it away, so a calibration is never lost to a broken read.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from trainmem.core.calibration import Calibration
from trainmem.sources.files import FileReadError, MissingFileError, read_json, show
from trainmem.sources.paths import state_dir
from trainmem.sources.plan_files import atomic_write

FORMAT_VERSION = 1
LIMIT = 4 * 2**20


class CalibrationFileError(ValueError):
    """A calibration file that cannot be used; ``str()`` is one line naming it."""


def calibration_path() -> Path:
    return state_dir() / "calibration.json"


def load_calibrations(path: Path | None = None) -> dict[str, Calibration]:
    """Every GPU's calibration (empty when there is no file yet)."""
    path = path or calibration_path()
    try:
        doc = read_json(path, limit=LIMIT, what="calibration file")
    except MissingFileError:
        return {}
    except FileReadError as exc:
        raise CalibrationFileError(f"{exc} (left as it is)") from None
    where = f"calibration file {show(path)}"
    if not isinstance(doc, dict) or not isinstance(doc.get("gpus"), dict):
        raise CalibrationFileError(f'{where} holds no "gpus" object (left as it is)')
    version = doc.get("format")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise CalibrationFileError(f"{where}: format {version!r} is not a format number")
    if version > FORMAT_VERSION:
        raise CalibrationFileError(
            f"{where} is in format {version}, from a newer trainmem; this one reads "
            f"{FORMAT_VERSION} (left as it is)"
        )
    return {gpu: _calibration(where, gpu, entry) for gpu, entry in doc["gpus"].items()}


def _calibration(where: str, gpu: str, entry: Any) -> Calibration:
    def bad(why: str) -> CalibrationFileError:
        return CalibrationFileError(f"{where}: {gpu!r}: {why} (left as it is)")

    if not isinstance(entry, dict):
        raise bad("not an object")
    context, reserve = entry.get("context_bytes"), entry.get("reserve_fraction")
    if not isinstance(context, int) or isinstance(context, bool) or context < 0:
        raise bad(f"context_bytes {context!r} is not a byte count")
    if (
        not isinstance(reserve, (int, float))
        or isinstance(reserve, bool)
        or not math.isfinite(reserve)
        or not 0 <= reserve <= 10
    ):
        raise bad(f"reserve_fraction {reserve!r} is not a fraction between 0 and 10")
    steps = entry.get("steps", 0)

    def text(key: str) -> str | None:
        value = entry.get(key)
        return str(value) if value is not None else None

    return Calibration(
        gpu=gpu,
        context_bytes=context,
        reserve_fraction=float(reserve),
        run=str(entry.get("run") or "a run"),
        steps=steps if isinstance(steps, int) and not isinstance(steps, bool) else 0,
        cuda=text("cuda"),
        torch=text("torch"),
    )


def save_calibration(cal: Calibration, path: Path | None = None) -> Path:
    """Add or replace ``cal``'s GPU in the file; CalibrationFileError when the existing file is
    broken (it is kept) or the folder cannot be written."""
    path = path or calibration_path()
    known = load_calibrations(path)  # raises for a broken file: never written over
    known[cal.gpu] = cal
    doc = {
        "format": FORMAT_VERSION,
        "gpus": {
            gpu: {
                "context_bytes": c.context_bytes,
                "reserve_fraction": round(c.reserve_fraction, 6),
                "run": c.run,
                "steps": c.steps,
                "cuda": c.cuda,
                "torch": c.torch,
            }
            for gpu, c in sorted(known.items())
        },
    }
    try:
        atomic_write(path, json.dumps(doc, indent=2) + "\n")
    except OSError as exc:
        raise CalibrationFileError(
            f"cannot write calibration file {show(path)}: {exc.strerror or exc}"
        ) from None
    return path
