"""SystemReader: RAM, swap and process lookups that tolerate every refusal."""

from __future__ import annotations

import os

from trainmem.devices import SystemReader
from trainmem.devices.fakes import FakeProc, FakePsutil

GiB = 2**30
# psutil's own exception classes, via the double (psutil ships no type stubs).
_ps = FakePsutil()
AccessDenied, NoSuchProcess, ZombieProcess = _ps.AccessDenied, _ps.NoSuchProcess, _ps.ZombieProcess


def test_ram_as_a_device() -> None:
    d = SystemReader(FakePsutil(total=64 * GiB, available=40 * GiB, swap=(8 * GiB, GiB))).read()
    assert (d.id, d.kind, d.name) == ("system", "system", "System RAM")
    assert d.total_bytes == d.usable_bytes == 64 * GiB
    assert d.used_bytes == 24 * GiB and d.free_bytes == 40 * GiB
    assert (d.swap_total_bytes, d.swap_used_bytes) == (8 * GiB, GiB)


def test_no_swap_accounting() -> None:
    d = SystemReader(FakePsutil(swap=None)).read()
    assert d.swap_total_bytes is None and d.total_bytes


def test_ram_unreadable_is_a_reason() -> None:
    ps = FakePsutil()
    ps.virtual_memory = lambda: (_ for _ in ()).throw(OSError("no /proc"))  # type: ignore[method-assign]
    d = SystemReader(ps).read()
    assert d.total_bytes is None and "no /proc" in (d.unavailable or "")


def test_process_details() -> None:
    ps = FakePsutil(processes={7: FakeProc("python3", "bob", ("python3", "train.py", "--lr", "1"))})
    info = SystemReader(ps).process(7)
    assert (info.name, info.user, info.cmdline) == ("python3", "bob", "python3 train.py --lr 1")
    assert info.unavailable is None


def test_process_of_another_user() -> None:
    ps = FakePsutil(processes={7: FakeProc(username=AccessDenied, cmdline=AccessDenied)})
    info = SystemReader(ps).process(7)
    assert info.name == "python" and info.user is None and info.cmdline is None
    assert info.unavailable == "no permission to read process details"


def test_pid_not_visible_in_container() -> None:
    info = SystemReader(FakePsutil()).process(424242)
    assert info.name is None and "PID namespace" in (info.unavailable or "")


def test_process_exits_between_calls() -> None:
    ps = FakePsutil(processes={7: FakeProc(cmdline=NoSuchProcess)})
    info = SystemReader(ps).process(7)
    assert info.name is None and "not visible" in (info.unavailable or "")


def test_zombie() -> None:
    ps = FakePsutil(processes={7: FakeProc(cmdline=ZombieProcess)})
    info = SystemReader(ps).process(7)
    assert info.name == "python" and info.cmdline is None and info.unavailable == "zombie process"


def test_empty_cmdline_is_none() -> None:
    info = SystemReader(FakePsutil(processes={7: FakeProc(cmdline=())})).process(7)
    assert info.cmdline is None and info.unavailable is None


def test_lookups_cached_while_pid_holds_memory() -> None:
    ps = FakePsutil(processes={7: FakeProc(), 8: FakeProc()})
    reader = SystemReader(ps)
    for _ in range(5):
        reader.process(7)
        reader.process(8)
    assert ps.calls["Process"] == 2
    reader.forget_except({8})
    reader.process(7)
    reader.process(8)
    assert ps.calls["Process"] == 3


def test_real_psutil() -> None:
    reader = SystemReader()
    d = reader.read()
    assert d.total_bytes and d.total_bytes > 0 and d.unavailable is None
    me = reader.process(os.getpid())
    assert me.name and me.unavailable is None
