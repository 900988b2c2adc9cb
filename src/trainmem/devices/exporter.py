"""`devices --serve`: this machine's samples as Prometheus metrics, through prometheus_client.

Each scrape reads the sampler's latest Snapshot (never the devices themselves: a scrape costs
no NVML call and cannot hang on one). `devices --serve` starts the exporter only once the
sampler has its first Snapshot, so no scrape finds the families empty; `devices --prometheus`
reads these series back (trainmem.devices.prometheus). Metrics, each labelled ``device``
(``gpu0``, ``system``), ``kind`` and ``name``:

    trainmem_device_total_bytes         the device's memory
    trainmem_device_used_bytes          in use now (on a GPU, with driver-reserved memory)
    trainmem_device_free_bytes          free now
    trainmem_device_usable_bytes        what a training run may plan against
    trainmem_device_peak_used_bytes     highest used since the exporter started
    trainmem_device_up                  1 while the device reports, 0 when unavailable
    trainmem_device_stale_seconds       age of the figures when its source is late, else 0
    trainmem_sample_timestamp_seconds   when the latest sample was taken (no labels)

and, when a plan is given, ``trainmem_plan_predicted_peak_bytes`` (labels ``model``,
``method``): the plan's predicted device peak, to compare with the GPUs' free memory in a query
or an alert. Figures a device cannot give are left out rather than reported as 0.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from trainmem.devices.snapshot import Snapshot

LABELS = ("device", "kind", "name")


@dataclass(frozen=True)
class PlanPeak:
    """The plan whose predicted device peak is exported."""

    model: str
    method: str
    peak_bytes: int


class SnapshotCollector(Collector):
    """Turns the latest snapshot into metrics at scrape time."""

    def __init__(self, latest: Callable[[], Snapshot | None], plan: PlanPeak | None = None):
        self.latest = latest
        self.plan = plan

    def collect(self) -> Iterator[Metric]:
        snap = self.latest()
        gauges = {
            field: GaugeMetricFamily(f"trainmem_device_{field}", doc, labels=LABELS)
            for field, doc in (
                ("total_bytes", "Device memory in bytes."),
                ("used_bytes", "Device memory in use, in bytes."),
                ("free_bytes", "Free device memory, in bytes."),
                ("usable_bytes", "Device memory a training run may plan against, in bytes."),
                ("peak_used_bytes", "Highest used bytes since the exporter started."),
                ("up", "1 while the device reports, 0 when it is unavailable."),
                ("stale_seconds", "Age of the figures when the device's source is late."),
            )
        }
        if snap is not None:
            for d in snap.devices:
                labels = [d.id, d.kind, d.name]
                up = d.unavailable is None
                gauges["up"].add_metric(labels, 1.0 if up else 0.0)
                gauges["stale_seconds"].add_metric(labels, d.stale_s or 0.0)
                for field in ("total_bytes", "used_bytes", "free_bytes", "usable_bytes"):
                    value = getattr(d, field)
                    if up and value is not None:
                        gauges[field].add_metric(labels, float(value))
                if d.peak_used_bytes is not None:
                    gauges["peak_used_bytes"].add_metric(labels, float(d.peak_used_bytes))
        yield from gauges.values()
        if snap is not None:
            stamp = GaugeMetricFamily(
                "trainmem_sample_timestamp_seconds", "When the latest sample was taken (Unix time)."
            )
            stamp.add_metric([], snap.timestamp)
            yield stamp
        if self.plan is not None:
            plan = GaugeMetricFamily(
                "trainmem_plan_predicted_peak_bytes",
                "The plan's predicted device peak per GPU, in bytes.",
                labels=("model", "method"),
            )
            plan.add_metric([self.plan.model, self.plan.method], float(self.plan.peak_bytes))
            yield plan


class Exporter:
    """An HTTP server on its own daemon thread answering /metrics from ``latest()``."""

    def __init__(
        self,
        latest: Callable[[], Snapshot | None],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        plan: PlanPeak | None = None,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(SnapshotCollector(latest, plan))
        # Port 0 picks a free one; server_address then says which.
        self._server, self._thread = start_http_server(port, addr=host, registry=self.registry)
        address = self._server.server_address
        self.host, self.port = str(address[0]), int(address[1])

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=2.0)
