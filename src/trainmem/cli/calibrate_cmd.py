"""`trainmem-tui calibrate PATH [PATH...]`: store this machine's measured CUDA runtime (the
context and the allocator's reserve ratio) per GPU model, from probe logs of real runs.

Later estimates for that GPU model use them for the runtime part of the device peak only
(never the allocated estimate) and say "calibrated from <run>"; `run-report --no-calibration`
ignores them. The file is $TRAINMEM_STATE_DIR (or $XDG_STATE_HOME/trainmem)/calibration.json,
written atomically; a broken one is reported and left untouched. Bad input: one line, exit 2,
and nothing stored: a log that is not usable, and a calibration that cannot be right (a
context larger than the GPU, a reserve over the allocated peak: see
trainmem.sources.calibration), so a bad run can never poison later plans.

A base path (``run.jsonl``, as given to TRAINMEM_RUN_LOG) stands for its rank files.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

PROG = "trainmem-tui calibrate"


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "calibrate",
        help="store this GPU's measured CUDA context and reserve from a probe log",
        description="Measure the CUDA context and allocator reserve in trainmem probe logs and "
        "store them per GPU model for later estimates.",
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", help="run logs of CUDA runs")
    parser.add_argument("--json", action="store_true", help="print what was stored as JSON")
    parser.set_defaults(run=run)


def run(ns: argparse.Namespace) -> int:
    from trainmem.core.text import visible
    from trainmem.planner.calibration import measure
    from trainmem.planner.run_report import size
    from trainmem.sources.calibration import save_calibration
    from trainmem.sources.run_logs import read_run_logs

    stored: list[dict[str, Any]] = []
    try:
        measured = [measure(log) for log in read_run_logs(ns.paths)]
        for m in measured:
            cal = m.calibration
            path = save_calibration(cal)
            stored.append(
                {
                    "gpu": cal.gpu,
                    "context_bytes": cal.context_bytes,
                    "reserve_fraction": round(cal.reserve_fraction, 6),
                    "reserve_correction": cal.reserve_correction,
                    "run": cal.run,
                    "steps": cal.steps,
                    "context_from": m.via,
                    # NCCL's modelled buffers taken out of the context (null: kept in it)
                    "nccl_bytes_removed": m.nccl_bytes,
                    "nccl_kept_because": m.nccl_kept or None,
                    "file": str(path),
                }
            )
    except ValueError as exc:  # RunLogError, CalibrationError, CalibrationFileError
        sys.stderr.write(f"{PROG}: error: {visible(str(exc))}\n")
        return 2
    if ns.json:
        json.dump(stored, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    for s in stored:
        alone = " (assumes the run was alone on the GPU)" if s["context_from"] != "nvml" else ""
        print(
            visible(
                f"{s['gpu']}: CUDA context {size(s['context_bytes'])} (from {s['context_from']}"
                f"{alone}), allocator reserve {100 * s['reserve_fraction']:.1f}% of the "
                f"allocated peak, {_correction(s['reserve_correction'])}; from {s['run']} "
                f"({s['steps']} steps) -> {s['file']}"
            )
        )
        if s["nccl_bytes_removed"]:
            print(
                f"  the context excludes {size(s['nccl_bytes_removed'])} of NCCL buffers "
                "modelled for the run's plan (multi-GPU plans add their own)"
            )
        elif s["nccl_kept_because"]:
            print(
                visible(
                    f"  the context includes NCCL's buffers: {s['nccl_kept_because']}; "
                    "multi-GPU plans on this GPU will count them twice (on the safe side)"
                )
            )
    return 0


def _correction(ratio: float | None) -> str:
    if ratio is None:
        return "no correction of the simulated reserve (the run's plan could not be rebuilt)"
    return f"{ratio:.3f} x the simulated reserve of the run's own plan"
