"""NCCL's buffers (core/nccl.py), hand-computed from NCCL 2.30.7's constants, and their place
in the device peak of a multi-GPU plan."""

from __future__ import annotations

from dataclasses import replace

from trainmem.core.estimator import device_peak_on, estimate
from trainmem.core.nccl import nccl_buffer_bytes
from trainmem.core.plan import Plan
from trainmem.core.runtime import built_in_figures, gpu_nvswitch
from trainmem.sources import catalog

MiB = 2**20


def test_one_process_has_no_nccl():
    assert nccl_buffer_bytes(1, 1, all_reduce=True, nvswitch=True, family="hopper") == 0


def test_8_h100s_in_one_node():
    # 24 ring channels: devComm 4 + 3 x 2 MiB x pow2Up(24) = 32 channels + (10 + 2) MiB x 24;
    # NVLS: 16 channels x (2 MiB of peers + 2 x 128 KiB x 8 steps x 8 heads) + 2 MiB credits
    ring = 4 + 6 * 32 + 12 * 24
    nvls = 16 * (2 + 2 * 8) + 2
    got = nccl_buffer_bytes(8, 1, all_reduce=False, nvswitch=True, family="hopper")
    assert got == (ring + nvls) * MiB == 774 * MiB


def test_between_nodes_only_all_reduce_uses_nvls_buffers():
    # 16 channels; the ring leaves the node on 16 / 8 = 2 of them (8 MiB more each)
    ring = 4 + 6 * 16 + 12 * 16 + 8 * 2
    init = 2 * 16 + 2  # NVLS peers and credits, set up whatever runs
    fsdp = nccl_buffer_bytes(8, 4, all_reduce=False, nvswitch=True, family="hopper")
    assert fsdp == (ring + init) * MiB
    ddp = nccl_buffer_bytes(8, 4, all_reduce=True, nvswitch=True, family="hopper")
    assert ddp == (ring + init + 2 * 16 * 8 + 20 * 16 * 3) * MiB  # buffers, a 3-peer tree
    two = nccl_buffer_bytes(8, 2, all_reduce=True, nvswitch=True, family="hopper")
    assert two == ddp - 20 * 16 * 2 * MiB  # two nodes: one tree peer


def test_pcie_and_ampere_have_no_nvls():
    assert nccl_buffer_bytes(2, 1, all_reduce=True, nvswitch=False, family="ada") == (
        (4 + 6 * 2 + 12 * 2) * MiB
    )
    a100 = nccl_buffer_bytes(4, 1, all_reduce=True, nvswitch=True, family="ampere")
    assert a100 == (4 + 6 * 32 + 12 * 24) * MiB  # 484 MiB (NVIDIA/nccl#964: 544-688 MB)


def test_which_gpus_are_on_nvswitch_boards():
    assert gpu_nvswitch("NVIDIA H100 80GB HBM3") and gpu_nvswitch("NVIDIA A100-SXM4-80GB")
    assert not gpu_nvswitch("NVIDIA H100 PCIe") and not gpu_nvswitch("NVIDIA H100 NVL")
    assert not gpu_nvswitch("NVIDIA GeForce RTX 4090")
    assert built_in_figures("NVIDIA H100 80GB HBM3").nvswitch


def test_a_multi_gpu_plan_holds_nccl_beside_the_allocator():
    model = "meta-llama/Llama-3.1-8B"
    entry = catalog.find(model)
    assert entry is not None
    spec = entry.spec()
    one = Plan(model=model, method="lora", device="h100-80gb").validated()
    figures = built_in_figures("H100-80GB")
    single = estimate(one, spec, figures=figures)
    assert single.component("NCCL buffers") == 0
    eight = estimate(replace(one, gpus=8).validated(), spec, figures=figures)
    expected = nccl_buffer_bytes(8, 1, all_reduce=True, nvswitch=True, family="hopper")
    assert eight.component("NCCL buffers") == expected
    assert eight.device_bytes == eight.allocated_bytes + sum(
        c.bytes for c in eight.components if c.kind == "runtime"
    )
    # on another GPU the same plan's NCCL is that GPU's: PCIe cards have no NVLS
    pcie = built_in_figures("NVIDIA H100 PCIe")
    assert eight.device_bytes_on("gpu", pcie) < eight.device_bytes
    # run within a GPU, the allocator gets what the context and NCCL leave
    tight = device_peak_on(eight, eight.device_bytes - 1, "gpu")
    assert tight.unlimited == eight.device_bytes


def test_over_nodes_the_all_reducing_strategies_use_nvls():
    model = "meta-llama/Llama-3.1-8B"
    entry = catalog.find(model)
    assert entry is not None
    figures = built_in_figures("H100-80GB")
    base = Plan(model=model, method="full", gpus=8, nodes=2, device="h100-80gb")

    def nccl_of(**fields: object) -> int:
        plan = replace(base, **fields).validated()
        return estimate(plan, entry.spec(), figures=figures).component("NCCL buffers")

    kw: dict = {"all_reduce": True, "nvswitch": True, "family": "hopper"}
    assert nccl_of(strategy="ddp") == nccl_buffer_bytes(8, 2, **kw)
    no_shard = nccl_of(strategy="fsdp", fsdp="no-shard", fsdp_version=1)
    assert no_shard == nccl_buffer_bytes(8, 2, **kw)
    kw["all_reduce"] = False
    assert nccl_of(strategy="fsdp") == nccl_buffer_bytes(8, 2, **kw)


def test_deepspeed_and_hsdp_hold_a_communicator_beside_the_default_group():
    hopper: dict = {"nvswitch": True, "family": "hopper"}
    # the default group, running only barriers and small gathers: its ring and NVLS's init
    barriers_one_node = 4 + 6 * 32 + 12 * 24 + (2 * 16 + 2)
    collectives_one_node = 774  # test_8_h100s_in_one_node
    clone = nccl_buffer_bytes(8, 1, all_reduce=False, groups="clone", **hopper)
    assert clone == (barriers_one_node + collectives_one_node) * MiB
    # HSDP on 4 nodes: barriers on all 32 GPUs, the node's group as on one node, and one GPU
    # a node all-reducing across nodes on 4 channels that all leave the node (no NVLS)
    barriers = 4 + 6 * 16 + 12 * 16 + 8 * 2 + (2 * 16 + 2)
    across = 4 + 6 * 4 + 12 * 4 + 8 * 4
    hybrid = nccl_buffer_bytes(8, 4, all_reduce=False, groups="hybrid", **hopper)
    assert hybrid == (barriers + collectives_one_node + across) * MiB
    # one node of HSDP: the group across nodes has one process, so no communicator
    assert nccl_buffer_bytes(8, 1, all_reduce=False, groups="hybrid", **hopper) == clone


def test_each_strategy_takes_its_groups():
    model = "meta-llama/Llama-3.1-8B"
    entry = catalog.find(model)
    assert entry is not None
    figures = built_in_figures("H100-80GB")
    base = Plan(model=model, method="full", gpus=8, nodes=4, device="h100-80gb")

    def nccl_of(**fields: object) -> int:
        plan = replace(base, **fields).validated()
        return estimate(plan, entry.spec(), figures=figures).component("NCCL buffers")

    kw: dict = {"nvswitch": True, "family": "hopper"}
    hsdp = nccl_of(strategy="fsdp", fsdp="hybrid-shard")
    assert hsdp == nccl_buffer_bytes(8, 4, all_reduce=False, groups="hybrid", **kw)
    assert nccl_of(strategy="zero", zero=3) == nccl_buffer_bytes(
        8, 4, all_reduce=False, groups="clone", **kw
    )
    # ZeRO-0 is DeepSpeed's data parallelism: an all-reduce, on the clone
    assert nccl_of(strategy="zero", zero=0) == nccl_buffer_bytes(
        8, 4, all_reduce=True, groups="clone", **kw
    )
    assert hsdp > nccl_of(strategy="fsdp")
