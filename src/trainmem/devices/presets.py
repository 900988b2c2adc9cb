"""Device presets for ``--device``: common GPUs and Apple unified memory sizes.

Pure data: no hardware access. Vendors' "80GB" is neither 80*10^9 nor 80*2^30 bytes usable:
the driver reserves some and ECC can take more. Each GPU's total is what NVML/nvidia-smi
reports as memory.total (MiB) on a current driver with the card's default ECC setting; the
comment after each number names the source. Apple's "36GB" is 36 GiB (sysctl hw.memsize).

A GeForce card's bare model number is one of its names (``4090`` is the RTX-4090), and a name
that is no preset gets the nearest ones as suggestions (``a100``: A100-40GB or A100-80GB).
"""

from __future__ import annotations

import difflib
import re

from trainmem.core.target import DeviceTarget

MiB = 2**20
GiB = 2**30

# name, NVML total in MiB, other names it is known by (NVML names included, so a detected
# device can be matched to its preset). Sources: nvidia-smi memory.total, as published in
# many nvidia-smi outputs (the brief gave A100-80GB, H100, H200, RTX 4090).
_GPUS: list[tuple[str, int, tuple[str, ...]]] = [
    ("T4", 15360, ("Tesla T4", "T4-16GB")),  # 15360; drivers before ~470 showed 15109 (ECC)
    ("L4", 23034, ("NVIDIA L4", "L4-24GB")),  # 23034
    ("A10G", 23028, ("NVIDIA A10G", "A10G-24GB")),  # 23028 (AWS g5)
    ("RTX-3060", 12288, ("GeForce RTX 3060", "RTX-3060-12GB")),  # 12288
    ("RTX-3090", 24576, ("GeForce RTX 3090", "RTX-3090-24GB")),  # 24576
    ("RTX-4060-Ti-16GB", 16380, ()),  # 16380; no plain "4060 Ti" alias: an 8 GB card exists
    ("RTX-4070", 12282, ("GeForce RTX 4070", "RTX-4070-12GB")),  # 12282
    ("RTX-4080", 16376, ("GeForce RTX 4080", "RTX-4080-16GB")),  # 16376
    ("RTX-4090", 24564, ("GeForce RTX 4090", "RTX-4090-24GB")),  # 24564
    ("RTX-5090", 32607, ("GeForce RTX 5090", "RTX-5090-32GB")),  # 32607
    # SXM boards and PCIe cards are presets of their own: the same memory, but only SXM GPUs
    # share NVSwitches, which decides NCCL's buffers (core/nccl.py)
    ("A100-40GB", 40960, ("A100-SXM4-40GB",)),  # 40960
    ("A100-40GB-PCIe", 40960, ("A100-PCIE-40GB",)),  # 40960
    ("A100-80GB", 81920, ("A100-SXM4-80GB",)),  # 81920
    ("A100-80GB-PCIe", 81920, ("A100 80GB PCIe", "A100-PCIE-80GB")),  # 81920
    ("H100-80GB", 81559, ("H100", "H100 80GB HBM3", "H100-SXM")),  # 81559
    ("H100-PCIe-80GB", 81559, ("H100 PCIe", "H100-PCIe")),  # 81559
    ("H100-NVL-94GB", 95830, ("H100 NVL", "H100-NVL")),  # 95830
    ("H200-141GB", 143771, ("H200",)),  # 143771
    ("B200-180GB", 183359, ("B200",)),  # 183359
    ("L40S", 46068, ("NVIDIA L40S", "L40S-48GB")),  # 46068 (ECC on, the default)
    ("RTX-A6000", 49140, ("A6000", "RTX A6000 48GB")),  # 49140 ECC off; 46068 with ECC on
    ("RTX-6000-Ada", 49140, ("RTX 6000 Ada Generation", "RTX-6000-Ada-48GB")),  # 49140 ECC off
]

# Apple silicon unified memory sizes sold, in GiB (hw.memsize is an exact power-of-two GiB).
_MAC_GIB = (16, 18, 24, 32, 36, 48, 64, 96, 128, 192)

_VENDOR = re.compile(r"^(nvidia|geforce|tesla)+")
# "RTX-4090" is also "4090"; "RTX-4060-Ti-16GB" is not "4060" (an 8 GB card exists).
_MODEL_NUMBER = re.compile(r"^RTX-(\d{4})$")


def _norm(name: str) -> str:
    """Case, spaces, dashes and underscores do not matter, nor a leading NVIDIA/GeForce/Tesla."""
    key = re.sub(r"[\s_\-]+", "", name.lower())
    return _VENDOR.sub("", key)


def _build() -> tuple[list[DeviceTarget], dict[str, DeviceTarget], dict[str, tuple[str, ...]]]:
    targets: list[DeviceTarget] = []
    index: dict[str, DeviceTarget] = {}
    names: dict[str, tuple[str, ...]] = {}
    for name, mib, aliases in _GPUS:
        target = DeviceTarget.gpu(name, mib * MiB)
        targets.append(target)
        number = _MODEL_NUMBER.match(name)
        names[name] = (*aliases, *(number.groups() if number else ()))
        for alias in (name, *names[name]):
            index.setdefault(_norm(alias), target)
    for gib in _MAC_GIB:
        target = DeviceTarget.unified(f"mac-{gib}GB", gib * GiB)
        targets.append(target)
        index[_norm(target.name)] = target
        names[target.name] = ()
    return targets, index, names


_TARGETS, _INDEX, _ALIASES = _build()


def resolve_preset(name: str) -> DeviceTarget | None:
    """``resolve_preset("rtx 4090")`` -> the RTX-4090 target; None if no preset has that name."""
    return _INDEX.get(_norm(name))


def list_presets() -> list[DeviceTarget]:
    """All presets, GPUs from small to large roughly as listed, then Apple sizes."""
    return list(_TARGETS)


def preset_aliases(name: str) -> tuple[str, ...]:
    """The other names a preset answers to (``RTX-4090``: ``GeForce RTX 4090``, ``4090``...)."""
    return _ALIASES.get(name, ())


def suggest_presets(name: str, limit: int = 4) -> list[str]:
    """Presets ``name`` may have meant: those whose names start with it (``a100``) or contain
    it (``4060``), else those spelt alike (``rtx4900``), nearest first."""
    key = _norm(name)
    if not key or len(key) > 64:  # difflib is quadratic: nothing long is a misspelt preset
        return []
    keys = list(_INDEX)
    found = [k for k in keys if k.startswith(key)]
    if len(key) >= 4:
        found += [k for k in keys if key in k]
    if not found:
        found = difflib.get_close_matches(key, keys, n=limit, cutoff=0.75)
    out: list[str] = []
    for k in found:
        if _INDEX[k].name not in out:
            out.append(_INDEX[k].name)
    return out[:limit]
