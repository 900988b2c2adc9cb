"""Training processes found through psutil (no probe): Python with torch loaded, their RSS and
USS, with a fake process table; and the real finder seeing a real CPU training process."""

from __future__ import annotations

import subprocess
import sys

import pytest

from trainmem.devices.processes import FakeProc, FakeProcessTable, MiB, ProcessFinder

NO_TORCH = "7f00 r-xp /usr/lib/libc.so.6\n"


def test_python_processes_with_torch_loaded_largest_first():
    table = FakeProcessTable(
        [
            FakeProc(10, rss_bytes=2048 * MiB),
            FakeProc(11, rss_bytes=8192 * MiB, name="torchrun", cmdline=("torchrun", "x.py")),
            FakeProc(12, rss_bytes=9000 * MiB, maps=NO_TORCH),  # python without torch
            FakeProc(13, name="postgres", cmdline=("postgres",), rss_bytes=20_000 * MiB),
        ]
    )
    found = table.finder().find()
    assert [p.pid for p in found] == [11, 10]
    assert found[0].torch is True and found[0].why == "has torch loaded"
    assert found[0].cmdline == "torchrun x.py" and found[0].uss_bytes is None


def test_unreadable_maps_count_only_large_python_processes():
    table = FakeProcessTable(
        [
            FakeProc(20, rss_bytes=2048 * MiB, maps=None),
            FakeProc(21, rss_bytes=200 * MiB, maps=None),
        ]
    )
    (found,) = table.finder(min_rss_bytes=1024 * MiB).find()
    assert found.pid == 20 and found.torch is None and found.why == "python with large RSS"


def test_maps_are_read_once_per_process_and_again_for_a_reused_pid():
    table = FakeProcessTable([FakeProc(30)])
    finder = table.finder()
    finder.find()
    finder.find()
    assert table.maps_read == [30]
    table.procs = [FakeProc(30, create_time=2.0, maps=NO_TORCH)]  # the PID was reused
    assert finder.find() == [] and table.maps_read == [30, 30]


def test_uss_on_request_and_refusals_are_none():
    table = FakeProcessTable(
        [FakeProc(40, uss_bytes=3000 * MiB), FakeProc(41, rss_bytes=1, uss_bytes=None)]
    )
    found = table.finder().find(uss=True, limit=5)
    assert [(p.pid, p.uss_bytes) for p in found] == [(40, 3000 * MiB), (41, None)]
    assert [p.pid for p in table.finder().find(limit=1)] == [40]
    assert table.finder().find(exclude=[40, 41]) == []


@pytest.mark.torch
def test_the_real_finder_sees_a_real_cpu_training_process():
    pytest.importorskip("torch")
    pytest.importorskip("psutil")
    loop = (
        "import torch,sys\n"
        "m=torch.nn.Linear(64,64); o=torch.optim.SGD(m.parameters(),lr=0.1)\n"
        "print('ready',flush=True)\n"
        "while True:\n"
        "    m(torch.randn(8,64)).sum().backward(); o.step(); o.zero_grad()\n"
    )
    child = subprocess.Popen([sys.executable, "-c", loop], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        found = {p.pid: p for p in ProcessFinder(min_rss_bytes=1).find(limit=100)}
        assert child.pid in found
        assert found[child.pid].rss_bytes > 0
        if sys.platform == "linux":
            assert found[child.pid].torch is True
    finally:
        child.kill()
        child.wait()
