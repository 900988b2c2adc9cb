"""Against a real Prometheus server (Debian's `prometheus` package), all on 127.0.0.1.

The server scrapes (a) `trainmem-tui devices --serve` in a subprocess with the NVML test double
injected, and (b) a loopback server with recorded-style dcgm-exporter and node_exporter text
exposition for three nodes (``honor_labels`` keeps their Hostname / instance labels). Then
PrometheusSource and `devices --prometheus URL --json` read it back: the three nodes, and the
exporter's own devices as node ``127.0.0.1`` (its scrape target's host).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from prom_fixtures import GPUS, RAM, MiB, dcgm_labels
from test_exporter import start_serving, stop

from trainmem.devices.prometheus import PrometheusSource

PROMETHEUS = shutil.which("prometheus")
pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.skipif(
        PROMETHEUS is None,
        reason="needs the `prometheus` binary (Debian: apt-get install prometheus)",
    ),
]
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def exposition(kind: str) -> str:
    """dcgm-exporter's or node_exporter's /metrics text for every node of the fixture."""
    lines: list[str] = []
    if kind == "dcgm":
        for name, field in (("USED", 2), ("FREE", 3), ("RESERVED", 4)):
            lines.append(f"# TYPE DCGM_FI_DEV_FB_{name} gauge")
            for gpu in GPUS:
                labels = dcgm_labels(gpu[0], gpu[1], gpu[5])
                labels.pop("job")
                text = ",".join(f'{k}="{v}"' for k, v in labels.items())
                lines.append(f"DCGM_FI_DEV_FB_{name}{{{text}}} {gpu[field]}")
    else:
        for name, field in (("MemTotal", 1), ("MemAvailable", 2)):
            lines.append(f"# TYPE node_memory_{name}_bytes gauge")
            for ram in RAM:
                lines.append(
                    f'node_memory_{name}_bytes{{instance="{ram[0]}"}} {float(ram[field])!r}'
                )
    return "\n".join(lines) + "\n"


class Exporters:
    """The recorded exporters on one loopback port: /dcgm and /node."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                kind = self.path.strip("/").split("?")[0]
                body = exposition(kind).encode()
                self.send_response(200 if kind in ("dcgm", "node") else 404)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get_json(url: str) -> Any:
    with DIRECT.open(url, timeout=5) as r:
        return json.loads(r.read())


def query(base: str, promql: str) -> list[dict[str, Any]]:
    answer = get_json(f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
    return list(answer["data"]["result"])


CONFIG = """
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: dcgm
    honor_labels: true
    metrics_path: /dcgm
    static_configs: [{{targets: ["127.0.0.1:{exporters}"]}}]
  - job_name: node
    honor_labels: true
    metrics_path: /node
    static_configs: [{{targets: ["127.0.0.1:{exporters}"]}}]
  - job_name: trainmem
    static_configs: [{{targets: ["127.0.0.1:{trainmem}"]}}]
"""


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    assert PROMETHEUS is not None
    tmp = tmp_path_factory.mktemp("prometheus")
    exporters = Exporters()
    serving, metrics_url = start_serving()
    trainmem_port = int(urllib.parse.urlsplit(metrics_url).port or 0)
    config = tmp / "prometheus.yml"
    config.write_text(CONFIG.format(exporters=exporters.port, trainmem=trainmem_port))
    port = free_port()
    log = (tmp / "prometheus.log").open("w")
    server = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=tmp,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_for_scrapes(base, server, tmp / "prometheus.log")
        yield base
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()
        stop(serving)
        exporters.close()


def _wait_for_scrapes(base: str, server: subprocess.Popen[bytes], log: Path) -> None:
    """Until every target has been scraped once and the data is queryable (bounded)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise AssertionError(f"prometheus exited: {log.read_text()[-2000:]}")
        try:
            targets = get_json(f"{base}/api/v1/targets")["data"]["activeTargets"]
            scraped = len(targets) == 3 and all(t["health"] == "up" for t in targets)
            if scraped and query(base, "DCGM_FI_DEV_FB_USED") and query(base, "trainmem_device_up"):
                return
        except OSError:
            pass  # not listening yet
        time.sleep(0.2)
    raise AssertionError(f"no scrape within 30 s: {log.read_text()[-2000:]}")


@pytest.fixture(autouse=True)
def _no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)


# What the `devices --serve` fakes (test_exporter.SERVE_SCRIPT) hold, as read back.
OWN = {
    "127.0.0.1/gpu0": ("gpu", 81_559 * MiB, 30_000 * MiB),
    "127.0.0.1/gpu1": ("gpu", 81_559 * MiB, 1_000 * MiB),
    "127.0.0.1/system": ("system", 64 * 2**30, 16 * 2**30),
}


def test_source_reads_every_node_from_a_real_prometheus(prometheus: str) -> None:
    readings = {d.id: d for d in PrometheusSource(prometheus, env={}).read()}
    nodes = {"node-1", "node-2", "node-10"}
    expected = {f"{n}/gpu{g}" for n, g, *_ in GPUS} | {f"{n}/system" for n in nodes}
    assert set(readings) == expected | set(OWN)
    for node, gpu, used, free, reserved, pod in GPUS:
        d = readings[f"{node}/gpu{gpu}"]
        assert d.used_bytes == (used + reserved) * MiB and d.free_bytes == free * MiB
        assert d.total_bytes == (used + free + reserved) * MiB and d.stale_s is None
        assert [p.name for p in d.processes] == ([pod] if pod else [])
    for instance, total, available in RAM:
        d = readings[f"{instance.split(':')[0]}/system"]
        assert d.total_bytes == total and d.free_bytes == available


def test_label_filter_against_real_promql(prometheus: str) -> None:
    source = PrometheusSource(prometheus, select='instance=~"node-(1|2):.*"', env={})
    assert {d.id.split("/")[0] for d in source.read()} == {"node-1", "node-2"}
    gpus_only = PrometheusSource(prometheus, select='job="dcgm"', env={})
    assert {d.kind for d in gpus_only.read()} == {"gpu"}


def test_devices_prometheus_json_against_a_real_prometheus(prometheus: str) -> None:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run(
        [sys.executable, "-m", "trainmem", "devices", "--prometheus", prometheus, "--json"],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    devices = {d["id"]: d for d in json.loads(out.stdout)["devices"]}
    assert devices["node-10/gpu0"]["used_bytes"] == (80_900 + 527) * MiB
    assert devices["node-2/system"]["free_bytes"] == 100 * 2**30
    assert devices["127.0.0.1/gpu1"]["used_bytes"] == 1_000 * MiB


def test_our_exporter_read_back_through_prometheus(prometheus: str) -> None:
    """`devices --serve` -> a real Prometheus -> PrometheusSource: the same figures."""
    source = PrometheusSource(prometheus, select='job="trainmem"', env={})
    readings = {d.id: d for d in source.read()}
    assert set(readings) == set(OWN)
    for device_id, (kind, total, used) in OWN.items():
        d = readings[device_id]
        assert (d.kind, d.total_bytes, d.used_bytes) == (kind, total, used), device_id
        assert d.free_bytes == total - used and d.usable_bytes == total
        assert d.unavailable is None and d.stale_s is None
    assert readings["127.0.0.1/gpu0"].name == "NVIDIA H100 80GB HBM3"


def test_devices_prometheus_table_shows_our_exporter(prometheus: str) -> None:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": os.pathsep.join(sys.path), "COLUMNS": "120"}
    argv = ["devices", "--prometheus", prometheus, "--select", 'job="trainmem"']
    out = subprocess.run(
        [sys.executable, "-m", "trainmem", *argv],
        capture_output=True,
        text=True,
        timeout=30,
        env={**env, "NO_COLOR": "1"},
        check=False,
    )
    assert out.returncode == 0, out.stderr
    rows = {line.split()[0]: line for line in out.stdout.splitlines() if "127.0.0.1/" in line}
    assert set(rows) == set(OWN)
    assert "31.5/85.5" in rows["127.0.0.1/gpu0"]  # 30,000 MiB used of 81,559 MiB, in GB


def test_our_exporter_was_scraped(prometheus: str) -> None:
    used = {
        r["metric"]["device"]: float(r["value"][1])
        for r in query(prometheus, 'trainmem_device_used_bytes{job="trainmem"}')
    }
    assert used == {"gpu0": 30_000 * MiB, "gpu1": 1_000 * MiB, "system": 16 * 2**30}
