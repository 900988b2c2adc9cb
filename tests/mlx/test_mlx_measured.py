"""The mlx stack's estimate against real mlx-lm steps on MLX's CPU build (the `mlx` extra):
two of bench/measure/mlx_measure.py's records, run here again, each in its own process as the
harness runs them (mlx-lm's grad_checkpoint patches the layer class for good)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mlx.core")
pytest.importorskip("mlx_lm")

from trainmem.core.architecture import spec_from_config
from trainmem.core.estimator import estimate
from trainmem.core.plan import Plan

pytestmark = pytest.mark.mlx
HARNESS = Path(__file__).resolve().parents[2] / "bench" / "measure"
sys.path.insert(0, str(HARNESS))
import mlx_measure  # noqa: E402

CASES = [  # fp32 (fast on MLX's CPU build), the tiny Llama, half its layers
    {"method": "lora", "optimizer": "adam"},
    {"method": "full", "optimizer": "adafactor"},
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["method"])
def test_estimate_within_3_percent_of_a_real_step(case: dict[str, object]) -> None:
    c = {
        "model": "llama-tiny",
        "dtype": "fp32",
        "bits": 0,
        "ckpt": False,
        "seq": 128,
        "batch": 2,
        "num_layers": 4,
        "rank": 8,
        **case,
    }
    child = subprocess.run(
        [sys.executable, str(HARNESS / "mlx_measure.py"), "--case", json.dumps(c)],
        capture_output=True,
        text=True,
        check=True,
    )
    measured = json.loads(child.stdout.strip().splitlines()[-1])
    record = mlx_measure.record(c, measured)
    plan = Plan(**record["plan"]).validated()
    spec = spec_from_config(record["model"]["config"], "llama-tiny")
    est = estimate(plan, spec, "cpu", "system")
    assert est.trainable_params == measured["trainable_params"]
    assert est.component("optimizer state") == measured["optimizer_state_bytes"]
    peak = measured["peak_allocated_bytes"]
    assert abs(est.allocated_bytes - peak) / peak < 0.03
