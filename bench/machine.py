"""The machine a benchmark ran on, for its report line (bench scripts import it as a sibling:
each runs as ``python bench/<name>.py``, which puts bench/ on the path)."""

from __future__ import annotations

import platform


def cpu_name() -> str:
    """The CPU's model name (Linux's /proc/cpuinfo), else what platform knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
