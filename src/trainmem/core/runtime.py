"""What the device shows beyond live tensors, by kind of device.

- CUDA GPUs: the CUDA context (kernel images, cuBLAS/cuDNN handles after the first step) and
  the caching allocator's reserved-but-unallocated memory (block rounding, fragmentation).
  These cannot be derived from the model. They come from ``RuntimeFigures``: the built-in
  table below (published measurements by GPU family and CUDA version, each cited), or this
  machine's own measurement (``trainmem-tui calibrate``, trainmem.core.calibration), passed in
  as data: the core reads no file.
- Unified memory (Apple silicon, MPS): no CUDA context. PyTorch's MPS allocator
  (aten/src/ATen/mps/MPSAllocator.mm) caches freed blocks too, but no measurement of its
  overhead exists here, so none is added and the note says so.
- CPU RAM: the allocated peak is what the process's tensors take; the Python process itself
  and the libraries' code are not counted, said in the note.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from trainmem.core.target import TargetKind

MiB = 2**20
# Used for every family without a published figure for its CUDA version (all of them under
# lazy loading, see BUILT_IN): a typical figure for PyTorch 2.x on CUDA 12, never measured here.
CUDA_CONTEXT_BYTES = 600 * MiB
ALLOCATOR_RESERVE_FRACTION = 0.08  # of the allocated peak; no published ratio was found
RUNTIME_COMPONENTS = ("CUDA context", "NCCL buffers", "allocator reserve")
# The smallest CUDA context published: 107 MiB, a bare context on an RTX 4060 Ti outside
# PyTorch (ggml-org/llama.cpp#23604, below). A measured context less NCCL's modelled buffers
# under this says the model does not fit the run (trainmem.planner.calibration).
BARE_CONTEXT_BYTES = 107 * MiB


@dataclass(frozen=True, slots=True)
class RuntimeFigures:
    """The CUDA runtime's share of the device peak: a context of ``context_bytes`` and a
    reserve of ``reserve_fraction`` x the allocated peak. ``source`` says where they come from
    (a citation, or "calibrated from <run>"); ``calibrated``: measured on this machine."""

    context_bytes: int
    reserve_fraction: float
    source: str
    calibrated: bool = False
    gpu_family: str | None = None  # the GPU's (gpu_family), for its library workspaces
    nvswitch: bool = False  # an SXM board's GPU (gpu_nvswitch): NCCL's channels over NVLink
    # A calibration's measured peak reserved over the simulated one for the same run's plan:
    # it scales the simulated reserve (None: the reserve is the fraction above).
    reserve_correction: float | None = None


TYPICAL = RuntimeFigures(
    CUDA_CONTEXT_BYTES,
    ALLOCATOR_RESERVE_FRACTION,
    "typical figures, not calibrated on a GPU",
)

# Lazy module loading (kernels load on first use) shipped in CUDA 11.7; PyTorch >= 1.13 turns it
# on when CUDA_MODULE_LOADING is unset (pytorch/pytorch#86509), and the driver does by default
# on Linux from CUDA 12.2 (CUDA Programming Guide, "Lazy Loading", change history). Contexts
# before it held every kernel of every library loaded.
LAZY_LOADING_CUDA = (11, 7)

# Published contexts under eager loading (CUDA < 11.7), by GPU family. The figure is what
# nvidia-smi showed for the process after `torch.Tensor(1).cuda()` (one 4-byte tensor, so
# the whole figure is context and the allocator's first 2 MiB block):
#   pascal 721 MiB: GTX 1080, torch 1.8.2+cu101; ampere 1687 MiB: RTX 3090, torch 1.8.2+cu111
#   (pytorch/pytorch#55277, comment by Sanster, 2022-04-12).
# Other families under eager loading: "Before CUDA 11.7, *all* kernels were loaded into the
# context once the library was loaded, which took >1000MB" (ptrblck, pytorch/pytorch#107667,
# 2023-08-28), so 1000 MiB, the floor that sentence gives.
# Under lazy loading (CUDA >= 11.7) no per-family figure was found: the published ones are for
# one small tensor on an unnamed GPU (274 MiB used incl. a 6.1 MiB tensor, pytorch#86509;
# "~300MB", pytorch#107667; "around 400MB", pytorch#109888), or at CUDA init before any kernel
# (426 MiB on an RTX 6000 Ada, torch 2.10.0+cu130, unslothai/unsloth-zoo#1053; 0.47 GB lazy vs
# 0.92 GB eager after torch.ones(1).cuda() on an 80 GB card, torch 2.1.1+cu121, stas00/
# ml-engineering training/performance/README.md), and outside PyTorch the bare context scales
# with the SM count within a family (107 MiB on an RTX 4060 Ti, 555 MiB on an RTX PRO 6000
# Blackwell: ggml-org/llama.cpp#23604), so a family is no key for it. A training step loads
# many more kernels and cuBLAS / cuDNN handles than any of these, so every family keeps
# TYPICAL's 600 MiB until a GPU run calibrates it (`trainmem-tui calibrate`).
EAGER_CONTEXT_MIB = {"pascal": 721, "ampere": 1687}
EAGER_DEFAULT_MIB = 1000
EAGER_SOURCES = {
    "pascal": "pytorch/pytorch#55277 (GTX 1080, CUDA 10.1)",
    "ampere": "pytorch/pytorch#55277 (RTX 3090, CUDA 11.1)",
}

# GPU names (as NVML and torch.cuda.get_device_name report them, or our presets) to families.
_FAMILIES = (
    ("blackwell", r"\b(b100|b200|gb200|rtx ?50\d\d|rtx pro \d+ blackwell)"),
    ("hopper", r"\b(h100|h200|h800|h20|gh200)\b"),
    ("ada", r"\b(l4|l40s?|rtx ?40\d\d|rtx \d+ ada)\b"),
    ("ampere", r"\b(a100|a800|a10g?|a16|a30|a40|rtx ?30\d\d|rtx a\d+)\b"),
    ("turing", r"\b(t4|rtx ?20\d\d|gtx ?16\d\d|quadro rtx|titan rtx)\b"),
    ("volta", r"\b(v100|titan v)\b"),
    ("pascal", r"\b(p100|p40|p4|gtx ?10\d\d|titan xp?)\b"),
)


def gpu_family(name: str) -> str | None:
    """The architecture of a GPU by its name ("NVIDIA H100 80GB HBM3" -> "hopper")."""
    text = _words(name)
    return next((family for family, pattern in _FAMILIES if re.search(pattern, text)), None)


def _words(name: str) -> str:
    """A GPU name as the patterns read it: lower case, ``-`` and ``_`` as spaces."""
    return name.lower().replace("-", " ").replace("_", " ")


# Data-centre GPUs sold on SXM boards, whose 4 or 8 GPUs share NVSwitches (HGX A100 / H100 /
# H200 / B200); their PCIe cards and the NVL bridge pairs do not.
_NVSWITCH = re.compile(r"\b(a100|a800|h100|h200|h800|b100|b200|b300|gb200|gb300)\b")


def gpu_nvswitch(name: str) -> bool:
    """Whether a GPU of that name is an SXM one ("NVIDIA H100 80GB HBM3": yes; "NVIDIA H100
    PCIe", "H100 NVL": no)."""
    text = _words(name)
    return bool(_NVSWITCH.search(text)) and not re.search(r"\b(pcie|nvl)\b", text)


def _cuda_tuple(cuda: str | None) -> tuple[int, int] | None:
    match = re.match(r"^\s*(\d+)\.(\d+)", cuda or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def built_in_figures(gpu_name: str | None = None, cuda: str | None = None) -> RuntimeFigures:
    """The built-in figures for a GPU of that name and a CUDA runtime of that version
    (``torch.version.cuda``; None: today's wheels, which all load lazily)."""
    version = _cuda_tuple(cuda)
    family = gpu_family(gpu_name or "")
    nvswitch = gpu_nvswitch(gpu_name or "")
    if version is None or version >= LAZY_LOADING_CUDA:
        return replace(TYPICAL, gpu_family=family, nvswitch=nvswitch) if family else TYPICAL
    if family in EAGER_CONTEXT_MIB:
        mib, source = EAGER_CONTEXT_MIB[family], EAGER_SOURCES[family]
    else:
        mib, source = EAGER_DEFAULT_MIB, "pytorch/pytorch#107667 (any GPU, CUDA < 11.7)"
    return RuntimeFigures(
        mib * MiB,
        ALLOCATOR_RESERVE_FRACTION,
        f"CUDA {cuda} loads every kernel eagerly: context from {source}",
        gpu_family=family,
        nvswitch=nvswitch,
    )


def runtime_overhead(
    kind: TargetKind,
    allocated_bytes: int,
    figures: RuntimeFigures | None = None,
    nccl_bytes: int = 0,
) -> dict[str, int]:
    """The runtime components for a device of ``kind`` (zero where none is modelled), with
    ``figures`` for a GPU (default: the typical ones) and NCCL's buffers of a multi-GPU plan
    (trainmem.core.nccl)."""
    if kind != "gpu":
        return {name: 0 for name in RUNTIME_COMPONENTS}
    figures = figures or TYPICAL
    return {
        "CUDA context": figures.context_bytes,
        "NCCL buffers": nccl_bytes,
        "allocator reserve": round(allocated_bytes * figures.reserve_fraction),
    }


def runtime_note(kind: TargetKind, figures: RuntimeFigures | None = None) -> str:
    """What the device peak adds on this kind of device, and how sure it is."""
    if kind == "unified":
        return (
            "unified memory (MPS): no CUDA context; the MPS allocator's cache is not "
            "measured, so the device peak is the allocated peak"
        )
    if kind == "system":
        return (
            "CPU RAM: the device peak is the tensors' peak; the Python process and libraries "
            "come on top"
        )
    figures = figures or TYPICAL
    if figures is TYPICAL:
        return (
            "runtime overhead (CUDA context, allocator reserve) uses typical figures, "
            "not yet calibrated on a GPU"
        )
    return f"runtime overhead (CUDA context, allocator reserve): {figures.source}"
