"""Device panes grouped by node for a cluster read from Prometheus: a summary row per node,
GPUs marked against the plan, one line per node when there are many, readable at 80x24."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from app_helpers import plain, settle

from trainmem.app import TrainmemApp
from trainmem.app.fixture import T0, demo_sampler_factory
from trainmem.app.widgets.devices import ClusterPane, DevicePane, DevicesPanel, PlanMark
from trainmem.devices.snapshot import DeviceReading, NvmlStatus, Snapshot
from trainmem.devices.target import targets_from_readings

MiB = 2**20
GiB = 2**30
H100 = 81_559 * MiB


def gpu(node: str, index: int, used: int, total: int = H100) -> DeviceReading:
    return DeviceReading(
        f"{node}/gpu{index}", "gpu", "NVIDIA H100 80GB HBM3", total, used, total - used, total
    )


def ram(node: str, used: int, total: int = 2048 * GiB) -> DeviceReading:
    return DeviceReading(f"{node}/system", "system", "System RAM", total, used, total - used, total)


def cluster(nodes: int, gpus: int, *, full: tuple[str, int] = ("node-3", 1)) -> list[DeviceReading]:
    out: list[DeviceReading] = []
    for n in range(1, nodes + 1):
        name = f"node-{n}"
        for g in range(gpus):
            used = H100 - 900 * MiB if (name, g) == full else 20 * GiB
            out.append(gpu(name, g, used))
        out.append(ram(name, 500 * GiB))
    return out


def lines(devices: list[DeviceReading], plan: int | None = None, width: int = 78) -> list[str]:
    pane = ClusterPane()
    marks = {d.id: PlanMark(plan) for d in devices if d.kind == "gpu"} if plan else {}
    pane.update_nodes(devices, marks)
    return [line.plain for line in pane._lines(width)]


def test_few_nodes_a_row_per_node_and_a_line_per_gpu_marked_against_the_plan() -> None:
    shown = lines(cluster(3, 2), plan=30 * GiB)
    assert shown[0].startswith("3 nodes, 6 GPUs · closest to full: node-3 gpu1 0.9 GB free")
    assert shown[1].startswith("node-1  2 GPU 43/171 GB  RAM 537/2199 GB  plan fits 2/2")
    assert shown[2].startswith("  gpu0 ") and shown[2].endswith("21.5 GB/85.5 GB ✓")
    node3 = shown.index(next(s for s in shown if s.startswith("node-3")))
    assert "plan fits 1/2" in shown[node3]
    assert shown[node3 + 2].endswith("✗ 31.3 GB short")
    assert all(len(s) <= 78 for s in shown)


def test_many_nodes_one_line_each_fit_80_columns() -> None:
    shown = lines(cluster(24, 8, full=("node-17", 5)), plan=30 * GiB)
    assert len(shown) == 25  # the header, then a line per node
    assert "closest to full: node-17 gpu5 0.9 GB free (1%)" in shown[0]
    assert shown[17].startswith("node-17  8 GPU") and "plan fits 7/8" in shown[17]
    assert all(len(s) <= 78 for s in shown)


def test_unavailable_stale_and_missing_nodes() -> None:
    devices = cluster(2, 1)
    devices[0] = dataclasses.replace(devices[0], stale_s=42.0)
    gone = "missing from Prometheus's answers for 30 s"
    devices[2:] = [
        DeviceReading(d.id, d.kind, d.name, None, None, None, None, unavailable=gone)
        for d in devices[2:]
    ]
    shown = lines(devices)
    assert "stale 42s" in shown[1]
    assert shown[3].startswith("node-2  1 GPU  1 unavailable") and gone in shown[3]
    assert shown[4] == f"  gpu0 unavailable: {gone}"


def test_a_cluster_is_judged_once_per_gpu_model() -> None:
    targets = targets_from_readings(cluster(12, 8))
    assert [(t.name, t.usable_bytes) for t in targets] == [
        ("cluster 96x NVIDIA H100 80GB HBM3", H100)
    ]


def snapshot(devices: list[DeviceReading], seq: int = 1) -> Snapshot:
    status = NvmlStatus(False, "not read: remote devices only")
    return Snapshot(timestamp=T0 + seq, devices=tuple(devices), nvml=status, seq=seq)


async def test_in_the_dashboard_at_80x24(demo_app: Callable[..., TrainmemApp]) -> None:
    first = snapshot(cluster(12, 8))
    app = demo_app(sampler_factory=demo_sampler_factory([first]))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(app, pilot)
        panel = app.screen.query_one(DevicesPanel)
        (pane,) = panel.query(ClusterPane)
        assert list(panel.query(DevicePane)) == []
        text = plain(pane)
        assert "12 nodes, 96 GPUs · closest to full: node-3 gpu1" in text
        assert "node-12  8 GPU" in text
        # A node dropping out and coming back redraws the same pane: nothing remounts.
        sampler = app.state.sampler
        fewer = [d for d in first.devices if not d.id.startswith("node-12/")]
        sampler.push(snapshot(fewer, 2))  # type: ignore[attr-defined]
        await settle(app, pilot)
        assert panel.query_one(ClusterPane) is pane and "node-12" not in plain(pane)
        sampler.push(snapshot(list(first.devices), 3))  # type: ignore[attr-defined]
        await settle(app, pilot)
        assert panel.query_one(ClusterPane) is pane and "node-12  8 GPU" in plain(pane)


async def test_the_monitor_compares_each_cluster_gpu_and_names_the_closest_to_full(
    demo_app: Callable[..., TrainmemApp],
) -> None:
    from textual.widgets import DataTable

    app = demo_app(sampler_factory=demo_sampler_factory([snapshot(cluster(3, 2))]))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        await pilot.press("f4")
        await settle(app, pilot)
        table = app.screen.query_one("#monitor-table", DataTable)
        rows = [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]
        hint = plain(app.screen.query_one("#monitor-free"))
    gpus = [r for r in rows if r[0].startswith("node-")]
    assert len(gpus) == 6  # one rank per GPU, each against the per-GPU prediction
    assert all(r[5] for r in gpus)
    assert "Closest to running out: node-3/gpu1" in hint


def test_a_large_cluster_lists_its_fullest_nodes_and_counts_the_rest() -> None:
    # 1,000 nodes took a row each, every row built two or three times a snapshot: the
    # dashboard's loop stalled over a second at each one
    devices = cluster(1000, 8, full=("node-617", 3))
    devices[5 * 9] = dataclasses.replace(devices[5 * 9], unavailable="gone", used_bytes=None)
    shown = lines(devices, plan=30 * GiB)
    assert len(shown) == 1 + 64 + 1
    assert shown[0].startswith("1000 nodes, 8000 GPUs · closest to full: node-617 gpu3")
    # a node whose GPU gives no reading is nearer trouble than any: first, then the fullest
    assert shown[1].startswith("node-6  8 GPU") and "1 unavailable" in shown[1]
    assert shown[2].startswith("node-617  8 GPU") and "plan fits 7/8" in shown[2]
    assert shown[-1] == "… 936 more nodes, each with 75% or more free"
    assert all(len(s) <= 78 for s in shown)
