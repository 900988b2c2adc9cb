"""Make `<repo>/bench` importable so tests can `import accuracy.peers`."""

import sys
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"
if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))
