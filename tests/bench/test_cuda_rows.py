"""The device-peak rows docs/accuracy.md gains from a CUDA run (bench/accuracy/compare.py):
no GPU has run the harness yet, so a recorded CPU step stands in, given the fields
bench/measure/cuda_stats.py writes on a GPU."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from accuracy import compare

from trainmem.core.estimator import estimate
from trainmem.core.runtime import built_in_figures

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results" / "measure-cpu.json"
GIB = 2**30
H200 = {"device": "cuda", "gpu": "NVIDIA H200", "cuda": "13.0"}
CONTEXT = {"nvml_used_before_init": 1 * GIB, "context_bytes": 500 * 2**20}


def cuda_record() -> dict:
    record = copy.deepcopy(
        next(r for r in json.loads(RESULTS.read_text())["records"] if r.get("measured"))
    )
    record["measured"]["cuda"] = {
        "max_allocated": 3 * GIB,
        "max_reserved": 4 * GIB,
        "nvml_used_max_polled": 6 * GIB,  # 5 GiB above what was used before CUDA started
    }
    return record


def test_a_cuda_record_is_compared_on_its_gpu_s_device_peak():
    record = cuda_record()
    row = compare.compare(record, "cuda", {**H200, "cuda_context": CONTEXT})
    figures = built_in_figures("NVIDIA H200", "13.0")
    assert figures.gpu_family == "hopper"  # its own cuBLAS workspace (32 MiB)
    est = estimate(row["plan"], compare_spec(record), "cuda", figures=figures)
    assert est.device_peak is not None
    cuda = row["cuda"]
    assert cuda["reserved"] == 4 * GIB and cuda["reserved ours"] == est.device_peak.reserved
    assert cuda["device"] == 5 * GIB and cuda["device ours"] == est.device_bytes
    assert cuda["context"] == 500 * 2**20 and cuda["context ours"] == figures.context_bytes

    lines = compare.cuda_section([row])
    table = next(line for line in lines if line.startswith(f"| {row['model']} |"))
    reserved_err = 100 * (est.device_peak.reserved - 4 * GIB) / (4 * GIB)
    device_err = 100 * (est.device_bytes - 5 * GIB) / (5 * GIB)
    assert f"| {4 * GIB / 1e9:.3f} | {est.device_peak.reserved / 1e9:.3f} |" in table
    assert compare.fmt_pct(reserved_err) in table and compare.fmt_pct(device_err) in table
    assert any("CUDA context measured 0.524 GB" in line for line in lines)  # 500 MiB


def test_a_cpu_record_or_one_without_nvml_keeps_to_what_it_measured():
    record = cuda_record()
    assert "cuda" not in compare.compare(record, "cpu")  # a CPU file: no machine passed
    row = compare.compare(record, "cuda", {**H200, "cuda_context": None})
    assert row["cuda"]["device"] is None  # no NVML baseline: no device figure, no error
    table = next(
        line for line in compare.cuda_section([row]) if line.startswith(f"| {row['model']}")
    )
    assert "| n/a |" in table
    assert compare.cuda_section([compare.compare(cuda_record(), "cpu")]) == []


def compare_spec(record: dict):
    from trainmem.core.architecture import spec_from_config

    return spec_from_config(compare.hf_config(record["model"]), record["model"]["name"])
