"""How fast is one estimate, and `plan --json` as a process? (Run on an idle machine.)

    .venv/bin/python bench/estimator_bench.py

In-process: the median time of one `estimate()` call (a catalogue model, every method).
As a process: `trainmem-tui plan --json` against `python -c pass` and against importing
textual, to show the headless path does not pay for the UI.
"""

from __future__ import annotations

import platform
import statistics
import subprocess
import sys
import time

from trainmem.core import Plan, estimate
from trainmem.core.fit import Budget
from trainmem.core.whatif import advice, max_batch, max_seq_len
from trainmem.sources import catalog
from trainmem.sources.resolve import resolve_model


def per_call(fn, n: int) -> float:
    samples = []
    for _ in range(7):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        samples.append((time.perf_counter() - start) / n)
    return statistics.median(samples)


def process(args: list[str], n: int = 7) -> float:
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        subprocess.run([sys.executable, *args], check=True, capture_output=True)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> None:
    print(f"machine: {platform.processor() or platform.machine()}, {platform.platform()}")
    print(f"python {platform.python_version()}; command: python bench/estimator_bench.py")
    spec = resolve_model("meta-llama/Llama-3.1-8B")
    for method in ("full", "lora", "qlora"):
        plan = Plan(model="meta-llama/Llama-3.1-8B", method=method)
        t = per_call(lambda p=plan: estimate(p, spec), 2000)
        print(f"estimate() {method:5s}: {t * 1e6:7.1f} us per call")
    plan = Plan(model="meta-llama/Llama-3.1-8B", method="lora")
    fits = Budget(40 * 10**9)  # a device it fits, so the searches run in full
    t = per_call(lambda: (max_seq_len(plan, spec, fits), max_batch(plan, spec, fits)), 20)
    print(f"what-if (longest sequence + largest batch): {t * 1e3:6.2f} ms")
    models = catalog.specs()  # the candidates of 'pick a smaller model', as `plan` passes
    t = per_call(lambda: advice(plan, spec, Budget(16 * 10**9), models), 20)  # too big: full advice
    print(f"advice (re-estimated remedies):              {t * 1e3:6.2f} ms")
    base = process(["-c", "pass"])
    textual = process(["-c", "import textual.app"])
    plan_json = process(["-m", "trainmem", "plan", "--model", "8B", "--device", "24GB", "--json"])
    print(f"process: python -c pass        {base * 1e3:6.0f} ms")
    print(f"process: import textual.app    {textual * 1e3:6.0f} ms")
    print(f"process: trainmem-tui plan --json {plan_json * 1e3:6.0f} ms")


if __name__ == "__main__":
    main()
