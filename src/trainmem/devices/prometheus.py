"""A cluster's memory, read from the Prometheus it already has: ``PrometheusSource``.

Each ``read()`` sends four instant queries (GET /api/v1/query) and maps the answers to one
``DeviceReading`` per GPU (id ``<node>/gpu<N>``) and one host-RAM reading per node
(``<node>/system``)::

    {__name__=~"DCGM_FI_DEV_FB_USED|DCGM_FI_DEV_FB_FREE|DCGM_FI_DEV_FB_RESERVED",SELECT}
    timestamp(DCGM_FI_DEV_FB_USED{SELECT})
    {__name__=~"node_memory_MemTotal_bytes|node_memory_MemAvailable_bytes",SELECT}
    timestamp(node_memory_MemAvailable_bytes{SELECT})

SELECT is the user's label filter (``--select``), put into every selector as given. dcgm-exporter
reports frame-buffer sizes in MiB; they are converted to bytes. A GPU's node is its ``Hostname``
label (dcgm-exporter's), else the host part of ``instance``; a node's RAM is node_exporter's
``instance`` host part. The two are joined when the names are equal ignoring case, or when one
is the other's short name (``node-1`` and ``node-1.cluster.local``).

The source runs on the sampler's own thread for it, so a slow or failing Prometheus holds back
nothing else: every request is bounded by one deadline per read, and a failure raises with a
one-line reason, which the sampler shows as the devices' ``unavailable``. A device that drops
out of the answers (its exporter down, a node drained) stays listed as unavailable, saying for
how long, until ``forget_after_s``; when it comes back it is live again.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from trainmem.devices.promql import (
    DCGM_FREE,
    DCGM_RESERVED,
    DCGM_USED,
    MEM_AVAILABLE,
    MEM_TOTAL,
    PASSWORD_ENV,
    TOKEN_ENV,
    USER_ENV,
    auth_header,
    check_select,
    check_url,
    host_of,
    queries,
)
from trainmem.devices.snapshot import DeviceKind, DeviceReading, ProcessReading, without_figures
from trainmem.devices.source import SourceUnavailable

MiB = 2**20
# Larger answers are refused: a cluster of thousands of GPUs is a few MB of JSON.
MAX_ANSWER_BYTES = 32 * 2**20


class PrometheusError(SourceUnavailable):
    """Prometheus could not be read; the message is one line a person can act on."""


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    # A redirect would carry the Authorization header to wherever it points.
    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str):  # type: ignore[no-untyped-def]
        raise PrometheusError(f"Prometheus redirected to {newurl}; give that URL instead")


@dataclass
class _Seen:
    reading: DeviceReading
    at: float  # time.monotonic() of the last answer that had it


@dataclass
class _Gpu:
    node: str
    labels: dict[str, str]
    values: dict[str, float] = field(default_factory=dict)
    pods: list[str] = field(default_factory=list)


class PrometheusSource:
    """Every node's GPUs (dcgm-exporter) and RAM (node_exporter) as Prometheus has them now.

    ``stale_after_s``: a device whose newest sample in Prometheus is older than this is marked
    ``stale_s`` (a scrape interval or two is normal). ``forget_after_s``: how long a device
    that left the answers stays listed as unavailable.
    """

    kind: DeviceKind = "gpu"

    def __init__(
        self,
        url: str,
        *,
        select: str = "",
        timeout: float = 3.0,
        env: Mapping[str, str] | None = None,
        stale_after_s: float = 90.0,
        forget_after_s: float = 600.0,
        name: str = "prometheus",
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.name = name
        self.url = check_url(url)
        self.select = check_select(select)
        self.timeout = float(timeout)
        self.stale_after_s = stale_after_s
        self.forget_after_s = forget_after_s
        # A conflict in the environment is reported by read(), as an outage is: a dashboard
        # then shows why instead of failing to start.
        self._auth_error: str | None = None
        try:
            self._auth = auth_header(os.environ if env is None else env)
        except ValueError as err:
            self._auth, self._auth_error = None, str(err)
        # Verification on, with the system's CAs (SSL_CERT_FILE / SSL_CERT_DIR respected).
        context = ssl_context or ssl.create_default_context()
        self._opener = urllib.request.build_opener(
            urllib.request.HTTPSHandler(context=context), _NoRedirect()
        )
        self._queries = queries(self.select)
        self._seen: dict[str, _Seen] = {}

    # -- HTTP --------------------------------------------------------------------------------

    def query(self, promql: str, deadline: float) -> list[dict[str, Any]]:
        """One instant query's result vector (raises PrometheusError)."""
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        request = urllib.request.Request(url, headers={"Accept": "application/json"})
        if self._auth:
            request.add_unredirected_header("Authorization", self._auth)
        left = deadline - time.monotonic()
        if left <= 0:
            raise PrometheusError(f"{self.url} timed out after {self.timeout:g} s")
        try:
            with self._opener.open(request, timeout=left) as response:
                body = _read_until(response, deadline)
        except urllib.error.HTTPError as err:
            raise PrometheusError(self._http_error(err)) from None
        except TimeoutError:
            raise PrometheusError(f"{self.url} timed out after {self.timeout:g} s") from None
        except urllib.error.URLError as err:
            if isinstance(err.reason, TimeoutError):  # while connecting
                raise PrometheusError(f"{self.url} timed out after {self.timeout:g} s") from None
            raise PrometheusError(f"cannot reach {self.url}: {_reason(err.reason)}") from None
        except (OSError, ValueError) as err:  # a connection reset, a malformed answer
            raise PrometheusError(f"cannot read {self.url}: {_reason(err)}") from None
        answer = _json(body)
        if not isinstance(answer, dict) or answer.get("status") != "success":
            raise PrometheusError(f"{self.url}: {_api_error(answer)}")
        data = answer.get("data")
        if not isinstance(data, dict) or data.get("resultType") != "vector":
            raise PrometheusError(f"{self.url}: not an instant-vector answer to {promql}")
        result = data.get("result")
        return [r for r in result if isinstance(r, dict)] if isinstance(result, list) else []

    def _http_error(self, err: urllib.error.HTTPError) -> str:
        with contextlib.suppress(Exception):  # no JSON error body: say what HTTP said
            answer = _json(err.read(64 * 1024))
            if isinstance(answer, dict) and answer.get("error"):
                return f"{self.url}: HTTP {err.code}: {_api_error(answer)}"
        if err.code in (401, 403):
            hint = f"set {TOKEN_ENV}, or {USER_ENV} and {PASSWORD_ENV}"
            if self._auth:
                hint = "the credentials from the environment were refused"
            return f"{self.url}: HTTP {err.code} {err.reason}: {hint}"
        return f"{self.url}: HTTP {err.code} {err.reason}"

    # -- DeviceSource ------------------------------------------------------------------------

    def read(self) -> tuple[DeviceReading, ...]:
        if self._auth_error:
            raise PrometheusError(self._auth_error)
        deadline = time.monotonic() + self.timeout
        answers = {what: self.query(q, deadline) for what, q in self._queries.items()}
        if not answers["gpu"] and not answers["ram"]:
            shown = f" matching {{{self.select}}}" if self.select else ""
            raise PrometheusError(
                f"{self.url} has no {DCGM_USED} or {MEM_TOTAL} series{shown} "
                "(dcgm-exporter and node_exporter not scraped, or filtered out)"
            )
        now = time.time()
        fresh = map_readings(answers, now=now, stale_after_s=self.stale_after_s)
        return self._with_missing(fresh, time.monotonic())

    def _with_missing(
        self, fresh: tuple[DeviceReading, ...], now: float
    ) -> tuple[DeviceReading, ...]:
        """``fresh`` plus, as unavailable, the devices seen lately that it lacks, in order."""
        for d in fresh:
            self._seen[d.id] = _Seen(d, now)
        out: list[DeviceReading] = []
        for device_id, seen in list(self._seen.items()):
            away = now - seen.at
            if away > self.forget_after_s:
                del self._seen[device_id]
            elif away > 0:
                out.append(_gone(seen.reading, away))
            else:
                out.append(seen.reading)
        return tuple(sorted(out, key=_order))


# -- mapping answers to readings -------------------------------------------------------------


def map_readings(
    answers: Mapping[str, list[dict[str, Any]]], *, now: float, stale_after_s: float = 90.0
) -> tuple[DeviceReading, ...]:
    """The readings the query answers describe (see the module's docstring), node by node."""
    gpus: dict[str, _Gpu] = {}
    for series in answers.get("gpu", ()):
        labels, value = _labels(series), _value(series)
        gpu_id = _gpu_id(labels)
        if gpu_id is None:
            continue  # neither node nor GPU named: nothing to show it as
        gpu = gpus.setdefault(gpu_id, _Gpu(gpu_id.partition("/")[0], labels))
        metric = labels.get("__name__", "")
        if value is not None and metric not in gpu.values:
            gpu.values[metric] = value
        pod = _pod(labels)
        if pod and pod not in gpu.pods:
            gpu.pods.append(pod)
    gpu_times = _times(answers.get("gpu_time", ()), _gpu_id)
    ram: dict[str, dict[str, float]] = {}
    for series in answers.get("ram", ()):
        labels, value = _labels(series), _value(series)
        node = _ram_node(labels)
        if node is not None and value is not None:
            ram.setdefault(node, {}).setdefault(labels.get("__name__", ""), value)
    ram_times = _times(answers.get("ram_time", ()), _ram_node)

    nodes = _join({g.node for g in gpus.values()}, set(ram) | set(ram_times))
    out: list[DeviceReading] = []
    for gpu_id, gpu in gpus.items():
        reading = _gpu_reading(gpu_id, gpu)
        out.append(_aged(reading, gpu_times.get(gpu_id), now, stale_after_s))
    for raw_node, values in ram.items():
        node = nodes.get(raw_node, raw_node)
        reading = _ram_reading(f"{node}/system", values)
        out.append(_aged(reading, ram_times.get(raw_node), now, stale_after_s))
    return tuple(sorted(out, key=_order))


def _gpu_reading(gpu_id: str, gpu: _Gpu) -> DeviceReading:
    labels, values = gpu.labels, gpu.values
    used, free = values.get(DCGM_USED), values.get(DCGM_FREE)
    reserved = values.get(DCGM_RESERVED)
    name = labels.get("modelName") or "GPU"
    if labels.get("GPU_I_PROFILE"):
        name += f" MIG {labels['GPU_I_PROFILE']}"
    procs = tuple(
        ProcessReading(
            pid=0,
            used_bytes=None,
            name=pod,
            cmdline=f"pod {pod}",
            unavailable="a Kubernetes pod (from dcgm-exporter's labels), not a local process",
        )
        for pod in gpu.pods
    )
    index = _int(labels.get("gpu"))
    uuid = labels.get("UUID") or labels.get("uuid") or None
    if used is None or free is None:
        missing = DCGM_USED if used is None else DCGM_FREE
        return DeviceReading(
            gpu_id, "gpu", name, None, None, None, None, procs, f"no {missing} value", index, uuid
        )
    # DCGM: total = used + free + reserved (MiB); NVML's `used` counts the reserved part too.
    res = reserved or 0.0
    total = round((used + free + res) * MiB)
    return DeviceReading(
        id=gpu_id,
        kind="gpu",
        name=name,
        total_bytes=total,
        used_bytes=round((used + res) * MiB),
        free_bytes=round(free * MiB),
        usable_bytes=total,
        processes=procs,
        index=index,
        uuid=uuid,
        reserved_bytes=None if reserved is None else round(reserved * MiB),
    )


def _ram_reading(device_id: str, values: dict[str, float]) -> DeviceReading:
    total, available = values.get(MEM_TOTAL), values.get(MEM_AVAILABLE)
    if total is None or available is None:
        missing = MEM_TOTAL if total is None else MEM_AVAILABLE
        return DeviceReading(
            device_id, "system", "System RAM", None, None, None, None, (), f"no {missing} value"
        )
    total_b, avail_b = round(total), min(round(available), round(total))
    return DeviceReading(
        id=device_id,
        kind="system",
        name="System RAM",
        total_bytes=total_b,
        used_bytes=total_b - avail_b,
        free_bytes=avail_b,
        usable_bytes=total_b,
    )


def _gpu_id(labels: Mapping[str, str]) -> str | None:
    node = labels.get("Hostname") or host_of(labels.get("instance", ""))
    gpu = labels.get("gpu") or labels.get("device") or labels.get("UUID")
    if not node or not gpu:
        return None
    gpu_id = f"{node}/gpu{gpu}" if gpu.isdigit() else f"{node}/{gpu}"
    if labels.get("GPU_I_ID"):
        gpu_id += f"/mig{labels['GPU_I_ID']}"
    return gpu_id


def _ram_node(labels: Mapping[str, str]) -> str | None:
    return host_of(labels.get("instance", "")) or None


def _pod(labels: Mapping[str, str]) -> str | None:
    pod = labels.get("pod") or labels.get("exported_pod")
    if not pod:
        return None
    namespace = labels.get("namespace") or labels.get("exported_namespace")
    return f"{namespace}/{pod}" if namespace else pod


def _join(gpu_nodes: set[str], ram_nodes: set[str]) -> dict[str, str]:
    """RAM node name -> the GPU node name it is the same machine as (itself if none)."""
    by_name = {n.lower(): n for n in gpu_nodes}
    short: dict[str, list[str]] = {}
    for n in gpu_nodes:
        short.setdefault(n.lower().split(".")[0], []).append(n)
    joined: dict[str, str] = {}
    for n in ram_nodes:
        key = n.lower()
        if key in by_name:
            joined[n] = by_name[key]
        elif len(short.get(key.split(".")[0], ())) == 1 and not _is_ip(n):
            joined[n] = short[key.split(".")[0]][0]
        else:
            joined[n] = n
    return joined


def _is_ip(host: str) -> bool:
    return ":" in host or host.replace(".", "").isdigit()


def _times(series: Any, key: Any) -> dict[str, float]:
    out: dict[str, float] = {}
    for s in series:
        k, value = key(_labels(s)), _value(s)
        if k is not None and value is not None:
            out[k] = max(value, out.get(k, value))
    return out


def _aged(d: DeviceReading, sampled_at: float | None, now: float, after: float) -> DeviceReading:
    """``d`` marked stale when Prometheus's newest sample of it is older than ``after``."""
    if sampled_at is None or now - sampled_at <= after:
        return d
    return replace(d, stale_s=now - sampled_at)


def _gone(d: DeviceReading, away: float) -> DeviceReading:
    return without_figures(d, f"missing from Prometheus's answers for {away:.0f} s")


def _order(d: DeviceReading) -> tuple[Any, ...]:
    """Nodes in natural order (node-2 before node-10), GPUs by index, RAM last."""
    node, _, rest = d.id.partition("/")
    return (_natural(node), d.kind == "system", _natural(rest))


def _natural(text: str) -> tuple[tuple[int, Any], ...]:
    return tuple(
        (0, int(part)) if part.isdigit() else (1, part.lower())
        for part in re.split(r"(\d+)", text)
        if part
    )


def _labels(series: Mapping[str, Any]) -> dict[str, str]:
    metric = series.get("metric")
    if not isinstance(metric, dict):
        return {}
    return {str(k): str(v) for k, v in metric.items()}


def _value(series: Mapping[str, Any]) -> float | None:
    """The sample's value; None for NaN, infinities, negatives and anything unreadable."""
    pair = series.get("value")
    if not isinstance(pair, list) or len(pair) != 2:
        return None
    try:
        value = float(pair[1])
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) and value >= 0 else None


def _int(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() else None


def _json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        raise PrometheusError("the answer is not JSON: is this a Prometheus server?") from None


def _api_error(answer: Any) -> str:
    if isinstance(answer, dict) and answer.get("error"):
        kind = answer.get("errorType")
        text = str(answer["error"]).splitlines()[0][:200] if str(answer["error"]) else "?"
        return f"{kind}: {text}" if kind else text
    return "not a Prometheus API answer"


def _reason(reason: object) -> str:
    if isinstance(reason, OSError) and reason.strerror:
        return reason.strerror
    text = str(reason).strip().splitlines()
    return text[0][:200] if text else type(reason).__name__


def _read_until(response: Any, deadline: float) -> bytes:
    """The body, read in pieces so a server that trickles cannot outlast the deadline."""
    chunks: list[bytes] = []
    size = 0
    while True:
        if time.monotonic() > deadline:
            raise TimeoutError
        chunk = response.read1(64 * 1024) if hasattr(response, "read1") else response.read()
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > MAX_ANSWER_BYTES:
            raise PrometheusError(f"the answer is larger than {MAX_ANSWER_BYTES // MiB} MiB")
        chunks.append(chunk)
