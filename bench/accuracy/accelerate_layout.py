"""Per-moment comparison of FSDP2 records (bench/measure/sharded.py --untied) with the estimate:
the measured peak between FSDP2's events (``measured.moments``) beside the estimator's moments.

    python bench/accuracy/accelerate_layout.py bench/results/measure-cpu-sharded-accelerate.json \
        [--moments SUBSTRING]

Measured moments, from the FSDP2 event labels ("<phase>|<event> <unit>"):
  forward      the forward phase's peak
  head         backward before the last decoder layer's pre_backward (the loss's backward,
               lm_head's and the final norm's, and, in accelerate's layout, the tail's
               reduce-scatter)
  last layer   pre/post_backward of the last decoder layer
  first layer  pre_backward of layer 0 (accelerate's layout: and its post_backward)
  embedding    accelerate's layout: pre/post_backward of the embedding unit; layers + root:
               layer 0's post_backward (the embedding's backward runs there) and the root's
  optimizer    the optimizer phase's peak
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from accuracy.compare import hf_config, to_plan
from trainmem.core.architecture import spec_from_config
from trainmem.core.estimator import estimate

ESTIMATE = {
    "forward": "forward",
    "head": "loss backward",
    "last layer": "backward (last layer)",
    "first layer": "backward (first layer)",
    "embedding": "backward (embedding)",
    "optimizer": "optimizer step",
}


def measured_moments(rec: dict[str, Any]) -> dict[str, tuple[int, str]]:
    m = rec["measured"]
    mo: dict[str, Any] = m["moments"]
    last = rec["model"]["config"]["num_hidden_layers"] - 1
    acc = rec.get("layout") == "accelerate"

    def peak(pred: Any) -> tuple[int, str]:
        found = [(v["bytes"], k) for k, v in mo.items() if pred(k)]
        return max(found) if found else (0, "")

    def bwd(k: str) -> bool:
        return k.startswith("backward|") and "finalize" not in k

    out = {
        "forward": peak(lambda k: k.startswith("forward|")),
        "head": peak(
            lambda k: (
                bwd(k)
                and "layers." not in k
                and "embed_tokens" not in k
                and not k.endswith("post_backward <root>")
            )
        ),
        "last layer": peak(lambda k: bwd(k) and k.endswith(f"model.layers.{last}")),
    }
    if acc:
        out["first layer"] = peak(lambda k: bwd(k) and k.endswith("model.layers.0"))
        out["embedding"] = peak(lambda k: bwd(k) and "embed_tokens" in k)
    else:
        out["first layer"] = peak(lambda k: k == "backward|pre_backward model.layers.0")
        out["embedding"] = peak(
            lambda k: (
                k in ("backward|post_backward model.layers.0", "backward|post_backward <root>")
            )
        )
    out["optimizer"] = (m["phase_peaks"]["optimizer"], "optimizer")
    return out


def row(rec: dict[str, Any]) -> dict[str, Any]:
    plan = to_plan(rec).validated()
    est = estimate(plan, spec_from_config(hf_config(rec["model"]), rec["model"]["name"]), "cpu")
    m = rec["measured"]
    moments = measured_moments(rec)
    top = max(m["moments"], key=lambda k: m["moments"][k]["bytes"])  # the peak's own label
    named = [k for k, (_, label) in moments.items() if label == top]
    where = named[0] if named else top.split("|", 1)[1]
    return {
        "rec": rec,
        "plan": plan,
        "measured": m["peak_allocated_bytes"],
        "ours": est.allocated_bytes,
        "measured_at": f"{m['peak_phase']}: {where}",
        "ours_at": max(est.phases, key=lambda k: est.phases[k]),
        "moments": {k: (b, est.phases[ESTIMATE[k]], label) for k, (b, label) in moments.items()},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path)
    ap.add_argument("--moments", default=None, help="print the moments of ids containing this")
    args = ap.parse_args()
    recs = [
        r
        for r in json.loads(args.results.read_text())["records"]
        if "moments" in r.get("measured", {})
    ]
    print(
        "| model | layout | FSDP | precision | world | seq | ckpt | measured GB | ours GB "
        "| error | peak: measured / ours |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for rec in recs:
        r = row(rec)
        p = r["plan"]
        precision = "bf16" if p.precision == "bf16" else f"bf16-mixed, reduce {p.reduce_dtype}"
        print(
            f"| {rec['model']['name']} | {rec.get('layout', 'manual')} | {p.fsdp} | {precision} | "
            f"{p.world} | {p.seq_len} | {'on' if p.grad_ckpt else 'off'} | "
            f"{r['measured'] / 1e9:.3f} | "
            f"{r['ours'] / 1e9:.3f} | {100 * (r['ours'] - r['measured']) / r['measured']:+.1f}% | "
            f"{r['measured_at']} / {r['ours_at']} |"
        )
        if args.moments and args.moments in rec["id"]:
            for k, (b, e, label) in r["moments"].items():
                print(
                    f"|  | {k} | measured {b / 1e6:.1f} MB | ours {e / 1e6:.1f} MB "
                    f"| {(e - b) / 1e6:+.1f} MB | {label} |"
                )


if __name__ == "__main__":
    main()
