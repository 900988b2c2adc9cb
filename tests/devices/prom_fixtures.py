"""Recorded-style dcgm-exporter and node_exporter data for several nodes, as Prometheus query
answers (JSON) and as text exposition, and a loopback server (127.0.0.1 only) that replays
them like Prometheus's /api/v1/query, with switches for slow, failing and partial answers."""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MiB = 2**20
GiB = 2**30

# (node, gpu, used MiB, free MiB, reserved MiB, pod or None); an H100 80GB is 81559 MiB.
GPUS = [
    ("node-1", 0, 70_000, 11_032, 527, "train/llama-sft-0"),
    ("node-1", 1, 2_000, 79_032, 527, None),
    ("node-2", 0, 40_000, 41_032, 527, "train/qwen-lora-0"),
    ("node-2", 1, 40_000, 41_032, 527, "train/qwen-lora-0"),
    ("node-10", 0, 80_900, 132, 527, "research/big-0"),
    ("node-10", 1, 0, 81_032, 527, None),
]
# (instance, MemTotal bytes, MemAvailable bytes)
RAM = [
    ("node-1:9100", 2048 * GiB, 1500 * GiB),
    ("node-2:9100", 2048 * GiB, 100 * GiB),
    ("node-10:9100", 1024 * GiB, 1000 * GiB),
]
UUIDS = {(n, g): f"GPU-{n}-{g}-0000-0000-000000000000" for n, g, *_ in GPUS}


def dcgm_labels(node: str, gpu: int, pod: str | None) -> dict[str, str]:
    labels = {
        "gpu": str(gpu),
        "UUID": UUIDS[(node, gpu)],
        "device": f"nvidia{gpu}",
        "modelName": "NVIDIA H100 80GB HBM3",
        "Hostname": node,
        "DCGM_FI_DRIVER_VERSION": "550.54.15",
        "instance": f"{node}:9400",
        "job": "dcgm",
    }
    if pod:
        labels["namespace"], labels["pod"] = pod.split("/")
        labels["container"] = "trainer"
    return labels


def series(name: str | None, labels: dict[str, str], value: float | str) -> dict[str, Any]:
    metric = dict(labels) if name is None else {"__name__": name, **labels}
    return {"metric": metric, "value": [time.time(), str(value)]}


def gpu_series(nodes: set[str] | None = None) -> list[dict[str, Any]]:
    out = []
    for node, gpu, used, free, reserved, pod in GPUS:
        if nodes is not None and node not in nodes:
            continue
        labels = dcgm_labels(node, gpu, pod)
        out.append(series("DCGM_FI_DEV_FB_USED", labels, used))
        out.append(series("DCGM_FI_DEV_FB_FREE", labels, free))
        out.append(series("DCGM_FI_DEV_FB_RESERVED", labels, reserved))
    return out


def ram_series(nodes: set[str] | None = None) -> list[dict[str, Any]]:
    out = []
    for instance, total, available in RAM:
        if nodes is not None and instance.split(":")[0] not in nodes:
            continue
        labels = {"instance": instance, "job": "node"}
        out.append(series("node_memory_MemTotal_bytes", labels, total))
        out.append(series("node_memory_MemAvailable_bytes", labels, available))
    return out


def times(items: list[dict[str, Any]], metric: str, age: float = 5.0) -> list[dict[str, Any]]:
    """What ``timestamp(metric{...})`` answers: the labels without the name, the sample time."""
    return [
        series(None, {k: v for k, v in s["metric"].items() if k != "__name__"}, time.time() - age)
        for s in items
        if s["metric"]["__name__"] == metric
    ]


def vector(result: list[dict[str, Any]]) -> dict[str, Any]:
    return {"status": "success", "data": {"resultType": "vector", "result": result}}


@dataclass
class Behaviour:
    """What the fake Prometheus does next; tests change it between reads."""

    nodes: set[str] | None = None  # None: every node
    gpu: list[dict[str, Any]] | None = None  # replaces the dcgm answer when set
    ram: list[dict[str, Any]] | None = None
    own: list[dict[str, Any]] = field(default_factory=list)  # `devices --serve` series
    age: float = 5.0  # how old the samples are
    status: int = 200
    body: bytes | None = None  # replaces the answer when set
    delay: float = 0.0  # seconds to wait before answering (released at teardown)
    redirect: str | None = None
    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)

    def answer(self, promql: str) -> dict[str, Any]:
        gpu = self.gpu if self.gpu is not None else gpu_series(self.nodes)
        ram = self.ram if self.ram is not None else ram_series(self.nodes)
        if promql.startswith("timestamp(DCGM_FI_DEV_FB_USED"):
            return vector(times(gpu, "DCGM_FI_DEV_FB_USED", self.age))
        if promql.startswith("timestamp(node_memory_MemAvailable_bytes"):
            return vector(times(ram, "node_memory_MemAvailable_bytes", self.age))
        if "DCGM_FI_DEV_FB_USED|" in promql:
            return vector(gpu)
        if "node_memory_MemTotal_bytes|" in promql:
            return vector(ram)
        if promql.startswith("timestamp(trainmem_device_up"):
            return vector(times(self.own, "trainmem_device_up", self.age))
        if "trainmem_device_total_bytes|" in promql:
            return vector(self.own)
        return {"status": "error", "errorType": "bad_data", "error": f"unknown query {promql}"}


class QuietServer(ThreadingHTTPServer):
    """A client that gave up (the timeout tests) is expected: no traceback on stderr."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass


class FakePrometheus:
    def __init__(self) -> None:
        self.behaviour = Behaviour()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                b = outer.behaviour
                url = urllib.parse.urlsplit(self.path)
                promql = urllib.parse.parse_qs(url.query).get("query", [""])[0]
                b.requests.append((promql, dict(self.headers.items())))
                if b.delay:
                    b.release.wait(b.delay)
                if b.redirect:
                    self.send_response(302)
                    self.send_header("Location", b.redirect)
                    self.end_headers()
                    return
                body = b.body if b.body is not None else json.dumps(b.answer(promql)).encode()
                if url.path != "/api/v1/query":
                    body, status = b"404 page not found", 404
                else:
                    status = b.status
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = QuietServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    def close(self) -> None:
        self.behaviour.release.set()
        self.server.shutdown()
        self.server.server_close()

    @property
    def queries(self) -> list[str]:
        return [q for q, _ in self.behaviour.requests]


def serve_fake() -> Iterator[FakePrometheus]:
    fake = FakePrometheus()
    try:
        yield fake
    finally:
        fake.close()


def refused_url() -> str:
    """A loopback URL nobody listens on (the port was just free)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def wait_for(predicate: Any, timeout: float = 5.0, step: float = 0.02) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    return predicate()
