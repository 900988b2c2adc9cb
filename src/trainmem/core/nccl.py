"""NCCL's own GPU memory per process of a multi-GPU plan, derived from NCCL 2.30.7's source.

NCCL allocates its buffers with cuMem, outside PyTorch's caching allocator, so they come on top
of the reserve like the CUDA context. Derived, not measured (no GPU here); the channel counts
are what NCCL's topology search picks at run time, so they are typical values, cited:

- each connection's buffers (src/init.cc:810-828, src/include/device.h): LL 512 KiB, LL128
  4.6875 MiB and SIMPLE 4 MiB, all three whichever protocol runs. Over NVLink / PCIe (P2P
  transport, src/transport/p2p.cc:407-491) the receiver holds them with its 4 KiB head and the
  sender 2 KiB, each rounded up to cuMem's 2 MiB granularity: 10 + 2 MiB a ring channel.
  Between nodes (NET transport with GPUDirect RDMA, src/transport/net.cc:916-1114) each side
  of a crossing holds 10 MiB: 8 MiB more than P2P's pair.
- per communicator: 4 MiB (devComm, src/init.cc:587-590) and 3 x 2 MiB per initialised
  channel, of which there are pow2Up(channels) (src/channel.cc:42-61, src/graph/paths.cc).
- NVLink SHARP on Hopper and Blackwell NVSwitch systems (src/transport/nvls.cc:155-554):
  2 MiB of peers per NVLS channel (16 on Hopper; Blackwell 24, 32 over nodes) and 2 MiB of
  credits at init; once used, 2 x 1 MiB x heads (one per GPU of the node) per channel.
  Between nodes only all-reduce uses it, as a tree adding 20 MiB per NVLS channel per tree
  peer (src/graph/connect.cc:295-316, src/graph/tuning.cc:505).
- channels: 24 on 8 NVSwitch-connected GPUs (6 found at 60 GB/s, doubled twice,
  src/graph/search.cc:1036-1048 and connect.cc:460; vllm-project/vllm#9699's log shows 24),
  16 between nodes (NVIDIA/nccl#1453's log), 2 over PCIe.
- connections are made when an algorithm first runs (NCCL_RUNTIME_CONNECT=1, the default
  since 2.22, src/init.cc:61): DDP's all-reduce and FSDP's / ZeRO's reduce-scatter and
  all-gather use the ring and, on NVSwitch systems, NVLS (src/graph/tuning.cc:294-297).
  Tree (the tuner's pick for some all-reduce sizes, up to 24 MiB a channel more) is not
  counted; nor are send / recv's buffers, which DDP and FSDP do not use.

Communicators per process, from the process groups the stacks make (each its own buffers:
ncclCommSplit shares none by default, NCCL_COMM_SPLIT_SHARE_RESOURCES=0). DDP and FSDP run
their collectives on the default group, which also carries the stack's barriers and logged
gathers (accelerate's wait_for_everyone, the Trainer's loss gather): one communicator.
DeepSpeed runs them on a clone of the world group (deepspeed 0.19.8 utils/groups.py
_clone_world_group, _get_data_parallel_group), HSDP on a group within the node and one across
nodes (torch 2.13 distributed/fsdp/_init_utils.py _init_intra_and_inter_node_groups;
FSDP2: the 2D device mesh's groups); the default group then runs only those barriers and
gathers, small all-reduces that connect the ring and not NVLS (whose SIMPLE-only algorithm
the tuner takes for large sizes), so it holds the ring and NVLS's init buffers alone. The
group across nodes has one GPU a node: its ring is counted with 4 channels (one NIC per GPU
found at 48 GB/s, doubled by src/graph/search.cc ncclTopoDupChannels and again in
src/graph/connect.cc), all crossing nodes.
Published for comparison: 544-688 MB on 4 NVLink A100s (NVIDIA/nccl#964), where this gives
484 MiB; 1.06 GB on 8 H100s before an all-to-all (NVIDIA/nccl#1685).
"""

from __future__ import annotations

from functools import partial

MiB = 2**20

RING_PAIR_MIB = 12  # a P2P channel's receive (10 MiB) and send (2 MiB) sides
NET_EXTRA_MIB = 8  # a channel crossing nodes holds 10 + 10 MiB instead of 12
CHANNEL_MIB = 6  # devPeers, shared devPeers, ring ranks: 3 x 2 MiB per initialised channel
COMM_MIB = 4  # devComm and rankToLocalRank
NVLS_HEAD_MIB = 2  # per NVLS channel and head: 2 x NVLS_CHUNKSIZE (128 KiB) x NCCL_STEPS (8)
NVLS_TREE_PEER_MIB = 20  # per NVLS channel and tree peer over the network (10 + 10 MiB)


def _pow2_up(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def _communicator_mib(
    gpus: int,
    nodes: int,
    *,
    all_reduce: bool,
    nvswitch: bool,
    family: str | None,
    collectives: bool = True,
    channels: int | None = None,
) -> int:
    """One communicator of ``gpus`` per node x ``nodes``; ``collectives=False``: it runs only
    barriers and small gathers (its ring connected, NVLS set up but never run)."""
    if gpus * nodes <= 1:
        return 0
    if channels is None:
        channels = (16 if nodes > 1 else 24) if nvswitch else 2
    mib = COMM_MIB + CHANNEL_MIB * _pow2_up(channels) + RING_PAIR_MIB * channels
    if nodes > 1:  # the ring leaves the node on about one channel in ``gpus``
        mib += NET_EXTRA_MIB * -(-channels // gpus)
    if nvswitch and gpus > 1 and family in ("hopper", "blackwell"):
        nvls = 16 if family == "hopper" else (32 if nodes > 1 else 24)
        mib += 2 * nvls + 2  # peers and credits, set up at init (src/channel.cc:98)
        # between nodes only all-reduce runs NVLS, as its tree (src/graph/tuning.cc:505)
        if collectives and (nodes == 1 or all_reduce):
            mib += NVLS_HEAD_MIB * nvls * gpus
        if collectives and nodes > 1 and all_reduce:
            mib += NVLS_TREE_PEER_MIB * nvls * (1 if nodes == 2 else 3)
    return mib


def nccl_buffer_bytes(
    gpus: int,
    nodes: int,
    *,
    all_reduce: bool,
    nvswitch: bool,
    family: str | None,
    groups: str = "default",
) -> int:
    """NCCL's GPU memory on one process of ``gpus`` per node x ``nodes`` (0 on one process):
    ring channels, and NVLS where the GPUs share a Hopper or Blackwell NVSwitch;
    ``all_reduce``: the gradients are all-reduced (DDP), which between nodes runs NVLS's tree.
    ``groups``: where the collectives run: "default" (DDP, FSDP), "clone" (DeepSpeed's
    clone of the world group) or "hybrid" (HSDP's group in the node and group across nodes),
    the last two beside the default group's barriers."""
    if gpus * nodes <= 1:
        return 0
    comm = partial(_communicator_mib, nvswitch=nvswitch, family=family)
    if groups == "default":
        mib = comm(gpus, nodes, all_reduce=all_reduce)
    elif groups in ("clone", "hybrid"):
        mib = comm(gpus, nodes, all_reduce=False, collectives=False)  # the default group
        if groups == "clone":
            mib += comm(gpus, nodes, all_reduce=all_reduce)
        else:  # HSDP reduce-scatters in the node and all-reduces the shards across nodes
            mib += comm(gpus, 1, all_reduce=False)
            mib += comm(1, nodes, all_reduce=True, channels=4)
    else:
        raise ValueError(f"groups must be 'default', 'clone' or 'hybrid', not {groups!r}")
    return mib * MiB
