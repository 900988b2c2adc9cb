"""What a plan is judged against: a device name, its kind, and how many bytes a run may use.

``parse_device_spec`` reads the planner's ``--device`` flag (every front end's device field
goes through it). GB means 10**9 bytes and GiB 2**30; a bare ``G`` is refused because people
mean either. A bare number is a preset's model number (``4090``) or, if none, a size without
its unit; a name that is no preset is answered with the presets it may mean.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from trainmem.core.target import DeviceTarget
from trainmem.core.units import fmt_bytes, parse_size, shown
from trainmem.devices.presets import resolve_preset, suggest_presets

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from trainmem.devices.nvml import NvmlReader
    from trainmem.devices.snapshot import DeviceReading
    from trainmem.devices.system import SystemReader

ACCEPTED = (
    "a preset (e.g. RTX-4090, H100-80GB, mac-36GB), a size (24GiB, 80GB), unified:36GB, "
    "ram:2TB (a node's host RAM, beside its GPUs), wired:27GB (macOS's GPU working set, beside "
    "unified memory), auto, or a comma-separated list of these"
)
LIST_THEM = "trainmem-tui devices --presets lists them"
MAX_ITEMS = 64  # devices in one spec: far more than any plan is judged against


def parse_device_spec(
    spec: str,
    *,
    nvml: NvmlReader | None = None,
    system: SystemReader | None = None,
    apple: bool | None = None,
    auto: Callable[[], list[DeviceTarget]] | None = None,
) -> list[DeviceTarget]:
    """``"RTX-4090"``, ``"24GiB"``, ``"unified:36GB"``, ``"auto"``, ``"A100-80GB,24GiB"``,
    ``"H100-80GB,ram:2TB"`` (the node's RAM: its host-RAM need is judged against it),
    ``"mac-36GB,wired:30GB"`` (macOS's GPU working set: what an MLX run may use).

    ``auto`` reads the machine now (NVML and psutil: call it off the UI thread), or is what
    the ``auto`` callable answers (the dashboard's latest sample). Raises ValueError with a
    one-line message naming what is accepted.
    """
    items = [s.strip() for s in spec.split(",", MAX_ITEMS)]
    if len(items) > MAX_ITEMS:
        raise ValueError(f"more than {MAX_ITEMS} devices in one --device; give fewer")
    if not spec.strip() or any(not s for s in items):
        raise ValueError(f"empty device in {shown(spec)}; use {ACCEPTED}")
    targets: list[DeviceTarget] = []
    wired: int | None = None
    for once in ("ram", "wired"):  # one node, one RAM and one working set: a second is a slip
        if sum(i.rpartition(":")[0].strip().lower() == once for i in items) > 1:
            raise ValueError(f"{once}: given twice in {shown(spec)}; give it once")
    for item in items:
        kind, _, size_text = item.rpartition(":")
        if kind.strip().lower() == "wired":
            wired = parse_size(size_text)
        elif auto is not None and item.lower() == "auto":
            targets.extend(auto())
        else:
            targets.extend(_parse_one(item, nvml, system, apple))
    if wired is not None:
        return _with_wired(targets, wired, spec)
    return targets


def _with_wired(targets: list[DeviceTarget], wired: int, spec: str) -> list[DeviceTarget]:
    """``wired:SIZE``: the GPU working set of the unified memory beside it (what
    ``sysctl iogpu.wired_limit_mb`` set, or Metal's recommendedMaxWorkingSetSize)."""
    unified = [t for t in targets if t.kind == "unified"]
    if not unified:
        raise ValueError(
            f"wired: is macOS's GPU limit of unified memory; give unified:SIZE or a mac "
            f"preset beside it in {shown(spec)}"
        )
    if any(wired > t.total_bytes for t in unified):
        raise ValueError(f"wired:{fmt_bytes(wired)} is more than the unified memory beside it")
    return [
        dataclasses.replace(t, wired_bytes=wired) if t.kind == "unified" else t for t in targets
    ]


def _parse_one(
    item: str, nvml: NvmlReader | None, system: SystemReader | None, apple: bool | None
) -> list[DeviceTarget]:
    if item.lower() == "auto":
        return detect_targets(nvml, system, apple=apple)
    preset = resolve_preset(item)
    if preset is not None:
        return [preset]
    kind, _, size_text = item.rpartition(":")
    kind = kind.strip().lower()
    if kind not in ("", "gpu", "unified", "ram"):
        raise ValueError(
            f"unknown device kind {shown(kind)} in {shown(item)}; "
            "use gpu:, unified:, ram: or wired:"
        )
    try:
        size = parse_size(size_text)
    except ValueError:
        if kind:
            raise  # a size that is wrong: its own message says how
        guesses = suggest_presets(item)
        meant = f"; did you mean {_either(guesses)}? ({LIST_THEM})" if guesses else ""
        if item.isascii() and item.isdigit():  # neither a model number nor a size with a unit
            n = item if len(item) <= 6 else "24"
            raise ValueError(
                f"{shown(item)} is no preset and needs a unit to be a size "
                f"(e.g. {n}GB or {n}GiB){meant}"
            ) from None
        if item[:1].isdigit() and not guesses:
            raise  # a size that is wrong: its own message says how
        raise ValueError(f"unknown device {shown(item)}{meant or f'; use {ACCEPTED}'}") from None
    label = size_text.strip()
    if kind == "ram":  # a node's host RAM, judged beside its GPUs (offload, loading)
        return [DeviceTarget.system(f"node RAM {label}", size)]
    if kind == "unified":
        return [DeviceTarget.unified(f"unified {label}", size)]
    return [DeviceTarget.gpu(f"GPU {label}", size)]


def _either(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def detect_targets(
    nvml: NvmlReader | None = None,
    system: SystemReader | None = None,
    *,
    apple: bool | None = None,
) -> list[DeviceTarget]:
    """The devices of this machine: every GPU (each MIG slice of a GPU in MIG mode), else
    unified memory (Apple silicon, GB10-class), else CPU RAM, so a verdict is always possible."""
    from trainmem.devices.sampler import read_devices  # reads hardware: only when asked

    devices, _status = read_devices(nvml, system, apple=apple)
    targets = targets_from_readings(devices)
    if not targets:
        raise ValueError("auto: no GPU found and system memory is not readable; give a size")
    return targets


def targets_from_readings(devices: Sequence[DeviceReading]) -> list[DeviceTarget]:
    """What ``auto`` means for these readings (also the dashboard's latest sample): every
    GPU (each MIG slice), else unified memory, else CPU RAM; empty if nothing is readable."""
    targets: list[DeviceTarget] = []
    # A cluster's GPUs (ids ``node/gpuN``, from Prometheus) count once per model and size: a
    # plan is judged per GPU, and ninety-six equal verdicts say no more than one.
    remote: dict[tuple[str, int], int] = {}
    for d in devices:
        if d.kind == "system" or d.unavailable is not None or not d.total_bytes:
            continue
        if "/" in d.id:
            remote[(d.name, d.total_bytes)] = remote.get((d.name, d.total_bytes), 0) + 1
            continue
        if d.kind == "unified":
            target = DeviceTarget.unified(d.name, d.total_bytes)
            targets.append(dataclasses.replace(target, wired_bytes=d.wired_limit_bytes))
        elif d.mig:
            targets.extend(
                DeviceTarget.gpu(f"{d.id} {m.name or f'MIG {m.index}'}", m.total_bytes)
                for m in d.mig
                if m.total_bytes
            )
        else:
            targets.append(DeviceTarget.gpu(f"{d.id} {d.name}", d.total_bytes))
    for (name, total), count in remote.items():
        targets.append(DeviceTarget.gpu(f"cluster {count}x {name}", total))
    if targets:
        return targets
    ram = next((d for d in devices if d.kind == "system" and d.total_bytes), None)
    if ram is None or ram.total_bytes is None:
        return []
    return [DeviceTarget.system("CPU RAM (no GPU found)", ram.total_bytes)]
