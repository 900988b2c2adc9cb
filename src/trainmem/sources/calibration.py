"""This machine's calibrations, one per GPU model, in the state folder (calibration.json).

Format 1::

    {"format": 1, "gpus": {"NVIDIA H100 80GB HBM3": {"context_bytes": 536870912,
      "reserve_fraction": 0.091, "run": "run.rank0.jsonl", "steps": 118, "cuda": "12.8",
      "torch": "2.13.0"}}}

Written atomically (plan_files.atomic_write). A file that cannot be read or parsed raises
``CalibrationFileError`` (one line) from ``load_calibrations`` and is never written over:
saving refuses until the user moves it away, so a calibration is never lost to a broken read.
Saving rewrites only its own GPU's entry: the others, and keys this version does not know, are
written back as they were.
Estimates read it with ``load_calibrations_or_warn``: a broken file counts as absent and a
broken or implausible entry as missing for that GPU alone, with one warning, so a bad file
can never stop a plan (least of all one for another GPU).

What is plausible (:func:`implausible`), from physical figures:
- the CUDA context (the driver's figure for the process minus the allocator's reserved
  bytes) is part of the GPU's memory: at most ``MAX_GPU_BYTES``, the largest memory of any GPU
  made (NVIDIA B300 "Blackwell Ultra", 288 GB of HBM3e), and when the run's device size is
  known, at most that size less the reserved peak;
- the reserve (peak reserved / peak allocated - 1) is what PyTorch's caching allocator holds
  beyond the tensors. It rounds each request up (c10/cuda/CUDACachingAllocator.cpp: to 512 B,
  kMinBlockSize; requests of up to 1 MiB are carved from 2 MiB segments, kSmallBuffer; 1-10
  MiB ones from 20 MiB segments, kLargeBuffer; larger ones to 2 MiB multiples, kRoundLarge)
  and keeps freed blocks cached, splitting them for later requests. Rounding a request of
  10 MiB or more up to a 2 MiB multiple adds under 20%, and the built-in figure is 8%
  (trainmem.core.runtime); holding more than twice the allocated peak (a fraction over
  ``MAX_RESERVE_FRACTION``, 1.0) is fragmentation of one run, or a toy run whose peak is a
  few MiB in 20 MiB segments, not a ratio to apply to other plans. That bound is a choice:
  the allocator itself bounds the reserve only by the device's memory, which the first rule
  checks (the reserved peak beside the context).
GPU names (the keys) must hold no control characters: they are shown in terminals.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from trainmem.core.calibration import Calibration
from trainmem.core.text import has_controls, visible
from trainmem.core.units import GB, shown
from trainmem.sources.files import FileReadError, MissingFileError, read_json, show
from trainmem.sources.paths import state_dir
from trainmem.sources.plan_files import atomic_write

FORMAT_VERSION = 1
LIMIT = 4 * 2**20
MAX_GPU_BYTES = 288 * GB  # NVIDIA B300: the most memory on one GPU made
MAX_RESERVE_FRACTION = 1.0  # reserved at most twice the allocated peak (see above)
MAX_NAME = 200  # characters of a GPU's name (NVML's are under 100)


class CalibrationFileError(ValueError):
    """A calibration file that cannot be used; ``str()`` is one line naming it."""


def calibration_path() -> Path:
    return state_dir() / "calibration.json"


def implausible(
    gpu: str,
    context_bytes: int,
    reserve_fraction: float | int,
    device_bytes: int | None = None,
    reserved_bytes: int = 0,
) -> str | None:
    """Why a calibration cannot be right (None: it is plausible); see the module's docstring.
    ``device_bytes`` and ``reserved_bytes``: the run's device size and reserved peak, when a
    run log gives them."""
    if not gpu.strip() or len(gpu) > MAX_NAME:
        return f"the GPU name {gpu[:60]!r} is empty or over {MAX_NAME} characters"
    if has_controls(gpu):  # repr() writes them as escapes
        return f"the GPU name {gpu!r} holds control characters"
    room = MAX_GPU_BYTES if device_bytes is None else min(MAX_GPU_BYTES, device_bytes)
    if context_bytes + reserved_bytes > room:
        readable = context_bytes.bit_length() <= 64  # else described: a 31-digit integer
        held = (
            f"a CUDA context of {f'{context_bytes:,} bytes' if readable else shown(context_bytes)}"
        )
        if reserved_bytes:
            held += f" beside {reserved_bytes:,} reserved"
        where = (
            f"the GPU's {device_bytes:,} bytes"
            if device_bytes is not None and device_bytes < MAX_GPU_BYTES
            else f"{MAX_GPU_BYTES // GB} GB, the most memory of any GPU made"
        )
        return f"{held} is more than {where}"
    if not 0 <= reserve_fraction <= MAX_RESERVE_FRACTION:
        return (
            f"reserve_fraction {shown(reserve_fraction)} (reserved / allocated peak - 1) is "
            f"outside 0..{MAX_RESERVE_FRACTION:g}: fragmentation of one run, or a run too small "
            "to calibrate, not a figure for other plans"
        )
    return None


def load_calibrations_or_warn(
    path: Path | None = None,
) -> tuple[dict[str, Calibration], str | None]:
    """The calibrations estimates may use, and one warning line when some could not be:
    a file that cannot be read counts as absent, an entry that is broken or implausible as
    missing for its GPU alone. Never raises: a bad file never stops a plan."""
    path = path or calibration_path()
    try:
        doc = _document(path)
    except CalibrationFileError as exc:
        return {}, f"{exc}; the built-in figures are used"
    if doc is None:
        return {}, None
    found: dict[str, Calibration] = {}
    bad: list[str] = []
    for gpu, entry in doc["gpus"].items():
        try:
            found[gpu] = _calibration(f"calibration file {show(path)}", gpu, entry)
        except CalibrationFileError as exc:
            bad.append(str(exc))
    if not bad:
        return found, None
    more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
    return found, f"{bad[0]}{more}; the built-in figures are used for that GPU"


def load_calibrations(path: Path | None = None) -> dict[str, Calibration]:
    """Every GPU's calibration (empty when there is no file yet); CalibrationFileError for a
    file, or an entry, that cannot be used (``save_calibration`` then refuses to write)."""
    path = path or calibration_path()
    return _checked(path, _document(path))


def _checked(path: Path, doc: dict[str, Any] | None) -> dict[str, Calibration]:
    if doc is None:
        return {}
    where = f"calibration file {show(path)}"
    return {gpu: _calibration(where, gpu, entry) for gpu, entry in doc["gpus"].items()}


def _document(path: Path) -> dict[str, Any] | None:
    """The file's JSON object, checked down to its "gpus" object; None: no file yet."""
    try:
        doc = read_json(path, limit=LIMIT, what="calibration file")
    except MissingFileError:
        return None
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
    return doc


def _calibration(where: str, gpu: str, entry: Any) -> Calibration:
    def bad(why: str) -> CalibrationFileError:
        return CalibrationFileError(f"{where}: {gpu[:60]!r}: {why} (left as it is)")

    if not isinstance(entry, dict):
        raise bad("not an object")
    context, reserve = entry.get("context_bytes"), entry.get("reserve_fraction")
    if not isinstance(context, int) or isinstance(context, bool) or context < 0:
        raise bad(f"context_bytes {shown(context)} is not a byte count")
    if (
        not isinstance(reserve, (int, float))
        or isinstance(reserve, bool)
        or (isinstance(reserve, float) and not math.isfinite(reserve))
    ):
        raise bad(f"reserve_fraction {shown(reserve)} is not a fraction")
    why = implausible(gpu, context, reserve)  # compares, never float(): ints may be huge
    if why is not None:
        raise bad(why)
    steps = entry.get("steps", 0)
    if not isinstance(steps, int) or isinstance(steps, bool) or not 0 <= steps <= 2**63:
        raise bad(f"steps {shown(steps)} is not a count of steps")

    def text(key: str) -> str | None:
        value = entry.get(key)
        return visible(value[:MAX_NAME]) if isinstance(value, str) else None

    correction = entry.get("reserve_correction")
    if correction is not None and not (
        isinstance(correction, (int, float))
        and not isinstance(correction, bool)
        and 0.5 <= correction <= 2.0  # compares: NaN and huge ints fail here
    ):
        raise bad(f"reserve_correction {shown(correction)} is not a ratio between 0.5 and 2")
    return Calibration(
        gpu=gpu,
        context_bytes=context,
        reserve_fraction=float(reserve),
        reserve_correction=None if correction is None else float(correction),
        run=text("run") or "a run",
        steps=steps,
        cuda=text("cuda"),
        torch=text("torch"),
    )


def save_calibration(cal: Calibration, path: Path | None = None) -> Path:
    """Add or replace ``cal``'s GPU in the file; CalibrationFileError when the existing file is
    broken (it is kept) or the folder cannot be written."""
    path = path or calibration_path()
    why = implausible(cal.gpu, cal.context_bytes, cal.reserve_fraction)
    if why is not None:  # `calibrate` checks first (with the run's figures): never stored
        raise CalibrationFileError(f"calibration of {cal.gpu[:60]!r} refused: {why}")
    found = _document(path)
    _checked(path, found)  # raises for a broken file or entry: never written over
    # The other GPUs' entries and any key this trainmem does not know (a newer one's, the
    # user's) are written back as they were; only this GPU's entry is new.
    doc = dict(found or {"format": FORMAT_VERSION})
    gpus = dict(doc.get("gpus", {}))
    gpus[cal.gpu] = {
        "context_bytes": cal.context_bytes,
        "reserve_fraction": round(cal.reserve_fraction, 6),
        "reserve_correction": cal.reserve_correction,
        "run": cal.run,
        "steps": cal.steps,
        "cuda": cal.cuda,
        "torch": cal.torch,
    }
    doc["gpus"] = dict(sorted(gpus.items()))
    try:
        atomic_write(path, json.dumps(doc, indent=2) + "\n")
    except OSError as exc:
        raise CalibrationFileError(
            f"cannot write calibration file {show(path)}: {exc.strerror or exc}"
        ) from None
    return path
