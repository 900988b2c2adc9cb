"""A cluster's memory, read from the Prometheus it already has: ``PrometheusSource``.

Each ``read()`` sends six instant queries (GET /api/v1/query) and maps the answers to one
``DeviceReading`` per GPU (id ``<node>/gpu<N>``) and one host-RAM reading per node
(``<node>/system``)::

    {__name__=~"DCGM_FI_DEV_FB_USED|DCGM_FI_DEV_FB_FREE|DCGM_FI_DEV_FB_RESERVED",SELECT}
    timestamp(DCGM_FI_DEV_FB_USED{SELECT})
    {__name__=~"node_memory_MemTotal_bytes|node_memory_MemAvailable_bytes",SELECT}
    timestamp(node_memory_MemAvailable_bytes{SELECT})
    {__name__=~"trainmem_device_total_bytes|...|trainmem_device_stale_seconds",SELECT}
    timestamp(trainmem_device_up{SELECT})

The last two read what `devices --serve` exports (trainmem.devices.exporter): each of its
devices becomes ``<node>/<device>`` (``node-1/gpu0``, ``node-1/system``, ``mac/unified``), the
node being the host part of ``instance``. Where dcgm-exporter or node_exporter already give a
device of the same id, theirs is kept.

SELECT is the user's label filter (``--select``), put into every selector as given. dcgm-exporter
reports frame-buffer sizes in MiB; they are converted to bytes. A GPU's node is its ``Hostname``
label (dcgm-exporter's), else the host part of ``instance``; a node's RAM is node_exporter's
``instance`` host part. The two are joined when the names are equal ignoring case, or when one
is the other's short name (``node-1`` and ``node-1.cluster.local``).

Answers are untrusted. Every failure of the request (refused, reset, cut short, a malformed
status line or body, a timeout) raises PrometheusError with one line, "cannot read Prometheus
at URL: why". Each label value is cut to ``MAX_LABEL`` characters with control characters
shown as ``\\xNN`` (so an id or name is the same safe text in every front end, JSON included),
and each figure is range-checked before any arithmetic: a value beyond ``MAX_GPU_MIB`` /
``MAX_BYTES`` makes its device unavailable, saying so, rather than a total of 10^300 bytes.

The source runs on the sampler's own thread for it, so a slow or failing Prometheus holds back
nothing else: every request is bounded by one deadline per read (the socket is shut down when
it passes, so a server that trickles its headers cannot outlast it either), and a failure
raises with a one-line reason, which the sampler shows as the devices' ``unavailable``.
A device that drops out of the answers (its exporter down, a node drained) stays listed as
unavailable, saying for how long, until ``forget_after_s``; when it comes back it is live.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import socket
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from trainmem.core.text import visible
from trainmem.core.units import NumberError, checked_number
from trainmem.devices.promql import (
    DCGM_FREE,
    DCGM_RESERVED,
    DCGM_USED,
    MEM_AVAILABLE,
    MEM_TOTAL,
    OWN_BYTES,
    OWN_PREFIX,
    OWN_STALE,
    OWN_UP,
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
# Larger answers are refused: a cluster of thousands of GPUs is a few MB of JSON (a dcgm
# series with Kubernetes' labels is about 500 bytes, three of them a GPU).
MAX_ANSWER_BYTES = 32 * 2**20
MAX_READ_BYTES = 48 * 2**20  # the six answers of one read together
# Series one answer may hold: 40,000 is over 13,000 GPUs' three figures. More is refused
# (narrow it with --select) before it is parsed, and so are answers holding more JSON
# objects, lists, strings or items than that many series can (parsed, a 31 MiB answer of
# empty objects took 700 MB).
MAX_SERIES = 40_000
MAX_DEVICES = 20_000  # devices listed, gone ones included (an autoscaling cluster's churn)
# What one series can hold at most: two objects (it and its labels), a value pair, and
# strings and commas for up to 40 labels.
_PER_SERIES = {b"{": 2, b"[": 1, b'"': 2 * (2 * 40 + 4), b",": 40 + 4}
# The labels read (the rest of a series' labels are dropped as it is taken).
_USED_LABELS = frozenset(
    (
        "__name__",
        "Hostname",
        "instance",
        "gpu",
        "device",
        "UUID",
        "uuid",
        "modelName",
        "GPU_I_PROFILE",
        "GPU_I_ID",
        "pod",
        "exported_pod",
        "namespace",
        "exported_namespace",
        "kind",
        "name",
    )
)
# Label values longer than this are cut (host names are at most 253 characters, RFC 1035).
MAX_LABEL = 256
# The largest figures believed, far above any device (a B200 has 183,359 MiB; the largest
# single-image servers about 32 TiB of RAM): beyond them a value is a broken exporter's.
MAX_GPU_MIB = 2**24  # 16 TiB of frame buffer
MAX_BYTES = 2**50  # 1 PiB, for byte figures (RAM, trainmem's devices)
MAX_SECONDS = 10**10  # timestamps and ages (year 2286)


class PrometheusError(SourceUnavailable):
    """Prometheus could not be read; the message is one line a person can act on."""


class _Refused(Exception):
    """An answer not taken (a redirect, an oversized body); the message says why."""


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    # A redirect would carry the Authorization header to wherever it points.
    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str):  # type: ignore[no-untyped-def]
        # The server's URL, not the one it chose: credentials are not sent where it points.
        try:
            split = urllib.parse.urlsplit(newurl)
            where = f"to {split.scheme}://{split.netloc}"
        except ValueError:  # "Invalid IPv6 URL": a "[" in a stranger's Location
            where = "to no valid URL"
        raise _Refused(
            f"it answered with a redirect (HTTP {code}, {where}), which is not followed: "
            "give the URL Prometheus itself serves at"
        )


class _Watch:
    """The sockets opened for one read, shut down once its deadline passes: the socket timeout
    bounds each wait, not a status line or headers trickled a byte at a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []
        self._expired = False

    def connect(self, *args: Any, **kwargs: Any) -> socket.socket:
        sock = socket.create_connection(*args, **kwargs)
        with self._lock:
            self._socks.append(sock)
            if self._expired:
                _shut(sock)
        return sock

    def expire(self) -> None:
        with self._lock:
            self._expired = True
            for sock in self._socks:
                _shut(sock)

    def reset(self) -> None:
        with self._lock:
            self._socks.clear()
            self._expired = False


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


def _watched(base: type[http.client.HTTPConnection], watch: _Watch) -> Callable[..., Any]:
    def make(*args: Any, **kwargs: Any) -> http.client.HTTPConnection:
        conn = base(*args, **kwargs)
        conn._create_connection = watch.connect  # type: ignore[attr-defined]
        return conn

    return make


class _HTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, watch: _Watch) -> None:
        super().__init__()
        self.watch = watch

    def http_open(self, req: Any) -> Any:
        return self.do_open(_watched(http.client.HTTPConnection, self.watch), req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, watch: _Watch, context: ssl.SSLContext) -> None:
        super().__init__(context=context)
        self.watch, self.context = watch, context

    def https_open(self, req: Any) -> Any:
        conn = _watched(http.client.HTTPSConnection, self.watch)
        return self.do_open(conn, req, context=self.context)


@dataclass
class _Seen:
    reading: DeviceReading
    at: float  # time.monotonic() of the last answer that had it


@dataclass
class _Gpu:
    node: str
    labels: dict[str, str]
    values: dict[str, float] = field(default_factory=dict)
    bad: dict[str, str] = field(default_factory=dict)  # metric -> why its value was refused
    pods: list[str] = field(default_factory=list)


class PrometheusSource:
    """Every node's GPUs (dcgm-exporter) and RAM (node_exporter), and the devices of any
    `devices --serve` exporter it scrapes, as Prometheus has them now.

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
        self.auth_error: str | None = None  # the command line refuses to start on one
        try:
            self._auth = auth_header(os.environ if env is None else env)
        except ValueError as err:
            self._auth, self.auth_error = None, str(err)
        # Verification on, with the system's CAs (SSL_CERT_FILE / SSL_CERT_DIR respected).
        context = ssl_context or ssl.create_default_context()
        self._watch = _Watch()
        self._opener = urllib.request.build_opener(
            _HTTPHandler(self._watch), _HTTPSHandler(self._watch, context), _NoRedirect()
        )
        self._queries = queries(self.select)
        self._seen: dict[str, _Seen] = {}
        self.bytes_read = 0  # by the read under way

    # -- HTTP --------------------------------------------------------------------------------

    def query(self, promql: str, deadline: float, budget: int = MAX_READ_BYTES) -> list[_Series]:
        """One instant query's result vector, each series with only the labels read (raises
        PrometheusError); ``budget``: the bytes the read has left."""
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        request = urllib.request.Request(url, headers={"Accept": "application/json"})
        if self._auth:
            request.add_unredirected_header("Authorization", self._auth)
        left = deadline - time.monotonic()
        if left <= 0:
            raise self._error(f"timed out after {self.timeout:g} s")
        self._watch.reset()
        timer = threading.Timer(left, self._watch.expire)
        timer.daemon = True
        timer.start()
        try:
            with self._opener.open(request, timeout=left) as response:
                body = _read_until(response, deadline, min(budget, MAX_ANSWER_BYTES))
        except urllib.error.HTTPError as err:
            raise self._error(self._http_error(err)) from None
        except _Refused as err:
            raise self._error(str(err)) from None
        except Exception as err:  # any failure of a request (http.client's too) is an outage
            if time.monotonic() >= deadline or _timed_out(err):
                raise self._error(f"timed out after {self.timeout:g} s") from None
            raise self._error(_reason(err)) from None
        finally:
            timer.cancel()
        self.bytes_read += len(body)
        crowded = next(
            (c for c, n in _PER_SERIES.items() if body.count(c) > n * MAX_SERIES + 16), None
        )
        if crowded is not None:
            raise self._error(
                f"the answer to {promql} holds more than {MAX_SERIES:,} series can "
                f"({crowded.decode()} x {body.count(crowded):,}): narrow it with --select"
            )
        answer = _json(body)
        del body
        if answer is None:
            raise self._error("the answer is not JSON: is this a Prometheus server?")
        if not isinstance(answer, dict) or answer.get("status") != "success":
            raise self._error(_api_error(answer))
        data = answer.get("data")
        if not isinstance(data, dict) or data.get("resultType") != "vector":
            raise self._error(f"not an instant-vector answer to {promql}")
        result = data.get("result")
        if not isinstance(result, list):
            return []
        if len(result) > MAX_SERIES:
            raise self._error(
                f"{len(result):,} series answer {promql}, over {MAX_SERIES:,}: "
                "narrow it with --select"
            )
        return [_slim(r) for r in result if isinstance(r, dict)]

    def _error(self, why: str) -> PrometheusError:
        """The one line every failure reads as; ``why`` may come from the server."""
        return PrometheusError(f"cannot read Prometheus at {self.url}: {_line(why)}")

    def _http_error(self, err: urllib.error.HTTPError) -> str:
        reason = _line(str(err.reason), 80)
        with contextlib.suppress(Exception):  # no JSON error body: say what HTTP said
            answer = _json(err.read(64 * 1024))
            if isinstance(answer, dict) and answer.get("error"):
                return f"HTTP {err.code}: {_api_error(answer)}"
        if err.code in (401, 403):
            hint = f"set {TOKEN_ENV}, or {USER_ENV} and {PASSWORD_ENV}"
            if self._auth:
                hint = "the credentials from the environment were refused"
            return f"HTTP {err.code} {reason}: {hint}"
        return f"HTTP {err.code} {reason}"

    # -- DeviceSource ------------------------------------------------------------------------

    def read(self) -> tuple[DeviceReading, ...]:
        if self.auth_error:
            raise PrometheusError(self.auth_error)
        deadline = time.monotonic() + self.timeout
        self.bytes_read = 0
        answers = {}
        for what, q in self._queries.items():  # each answer slimmed before the next is read
            left = MAX_READ_BYTES - self.bytes_read
            if left <= 0:
                raise self._error(f"the answers are larger than {MAX_READ_BYTES // MiB} MiB")
            answers[what] = self.query(q, deadline, left)
        if not answers["gpu"] and not answers["ram"] and not answers["own"]:
            shown = f" matching {{{self.select}}}" if self.select else ""
            raise PrometheusError(
                f"{self.url} has no {DCGM_USED}, {MEM_TOTAL} or {OWN_UP} series{shown} "
                "(dcgm-exporter, node_exporter and trainmem-tui devices --serve not scraped, "
                "or filtered out)"
            )
        now = time.time()
        fresh = map_readings(answers, now=now, stale_after_s=self.stale_after_s)
        return self._with_missing(fresh, time.monotonic())

    def _with_missing(
        self, fresh: tuple[DeviceReading, ...], now: float
    ) -> tuple[DeviceReading, ...]:
        """``fresh`` plus, as unavailable, the devices seen lately that it lacks, in order."""
        for d in fresh:
            self._seen.pop(d.id, None)  # re-inserted last: the dict runs oldest seen first
            self._seen[d.id] = _Seen(d, now)
        while len(self._seen) > MAX_DEVICES:  # the longest gone go first
            del self._seen[next(iter(self._seen))]
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
        labels = _labels(series)
        gpu_id = _gpu_id(labels)
        if gpu_id is None:
            continue  # neither node nor GPU named: nothing to show it as
        gpu = gpus.setdefault(gpu_id, _Gpu(gpu_id.partition("/")[0], labels))
        metric = labels.get("__name__", "")
        value, why = _value(series, MAX_GPU_MIB)
        if value is not None and metric not in gpu.values:
            gpu.values[metric] = value
        elif why is not None:
            gpu.bad.setdefault(metric, why)
        pod = _pod(labels)
        if pod and pod not in gpu.pods:
            gpu.pods.append(pod)
    gpu_times = _times(answers.get("gpu_time", ()), _gpu_id)
    ram: dict[str, dict[str, float]] = {}
    ram_bad: dict[str, dict[str, str]] = {}
    for series in answers.get("ram", ()):
        labels = _labels(series)
        node = _ram_node(labels)
        value, why = _value(series, MAX_BYTES)
        if node is None:
            continue
        metric = labels.get("__name__", "")
        if value is not None:
            ram.setdefault(node, {}).setdefault(metric, value)
        elif why is not None:
            ram.setdefault(node, {})
            ram_bad.setdefault(node, {}).setdefault(metric, why)
    ram_times = _times(answers.get("ram_time", ()), _ram_node)
    own = _own_devices(answers.get("own", ()))
    own_times = _times(answers.get("own_time", ()), _own_id)

    gpu_nodes = {g.node for g in gpus.values()} | {d.id.partition("/")[0] for d in own.values()}
    nodes = _join(gpu_nodes, set(ram) | set(ram_times))
    out: list[DeviceReading] = []
    for gpu_id, gpu in gpus.items():
        reading = _gpu_reading(gpu_id, gpu)
        out.append(_aged(reading, gpu_times.get(gpu_id), now, stale_after_s))
    for raw_node, values in ram.items():
        node = nodes.get(raw_node, raw_node)
        reading = _ram_reading(f"{node}/system", values, ram_bad.get(raw_node, {}))
        out.append(_aged(reading, ram_times.get(raw_node), now, stale_after_s))
    taken = {d.id for d in out}
    for own_id, device in own.items():
        if own_id not in taken:  # dcgm-exporter's or node_exporter's reading of it is kept
            out.append(_aged(_own_reading(device), own_times.get(own_id), now, stale_after_s))
    return tuple(sorted(out, key=_order))


@dataclass
class _Own:
    """One device of a `devices --serve` exporter, as its series describe it."""

    id: str
    kind: DeviceKind
    name: str
    instance: str
    values: dict[str, float] = field(default_factory=dict)
    bad: dict[str, str] = field(default_factory=dict)


_KINDS: dict[str, DeviceKind] = {"gpu": "gpu", "system": "system", "unified": "unified"}


def _own_id(labels: Mapping[str, str]) -> str | None:
    node, device = host_of(labels.get("instance", "")), labels.get("device", "")
    return f"{node}/{device}" if node and device else None


def _own_devices(series_list: Any) -> dict[str, _Own]:
    own: dict[str, _Own] = {}
    for series in series_list:
        labels = _labels(series)
        device_id, kind = _own_id(labels), _KINDS.get(labels.get("kind", ""))
        if device_id is None or kind is None:
            continue
        name = labels.get("name") or labels.get("device", "")
        device = own.setdefault(device_id, _Own(device_id, kind, name, labels.get("instance", "")))
        metric = labels.get("__name__", "").removeprefix(OWN_PREFIX)
        value, why = _value(series, MAX_BYTES if metric in OWN_BYTES else MAX_SECONDS)
        if value is not None:
            device.values.setdefault(metric, value)
        elif why is not None:
            device.bad.setdefault(metric, why)
    return own


def _own_reading(d: _Own) -> DeviceReading:
    values = d.values
    up = values.get(OWN_UP.removeprefix(OWN_PREFIX))
    if up is not None and up < 1:
        reason = f"unavailable, says trainmem-tui devices --serve at {d.instance}"
        return DeviceReading(d.id, d.kind, d.name, None, None, None, None, (), reason)
    figures = {f: values.get(f) for f in OWN_BYTES}
    missing = next((f for f, v in figures.items() if v is None), None)
    if missing is not None:
        why = d.bad.get(missing)
        reason = f"{OWN_PREFIX}{missing}: {why}" if why else f"no {OWN_PREFIX}{missing} value"
        return DeviceReading(d.id, d.kind, d.name, None, None, None, None, (), reason)
    total, used, free, usable = (round(figures[f] or 0) for f in OWN_BYTES)
    stale = values.get(OWN_STALE.removeprefix(OWN_PREFIX))
    return DeviceReading(
        id=d.id,
        kind=d.kind,
        name=d.name,
        total_bytes=total,
        used_bytes=min(used, total),
        free_bytes=min(free, total),
        usable_bytes=min(usable, total),
        stale_s=stale if stale else None,  # the exporter's own source was late
    )


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
    if used is None or free is None or DCGM_RESERVED in gpu.bad:
        missing = DCGM_USED if used is None else DCGM_FREE if free is None else DCGM_RESERVED
        why = gpu.bad.get(missing)
        reason = f"{missing}: {why}" if why else f"no {missing} value"
        return DeviceReading(
            gpu_id, "gpu", name, None, None, None, None, procs, reason, index, uuid
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


def _ram_reading(device_id: str, values: dict[str, float], bad: dict[str, str]) -> DeviceReading:
    total, available = values.get(MEM_TOTAL), values.get(MEM_AVAILABLE)
    if total is None or available is None:
        missing = MEM_TOTAL if total is None else MEM_AVAILABLE
        why = bad.get(missing)
        reason = f"{missing}: {why}" if why else f"no {missing} value"
        return DeviceReading(device_id, "system", "System RAM", None, None, None, None, (), reason)
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
    # a GPU labelled "system" or "unified" must not take the id of the node's RAM
    gpu_id = (
        f"{node}/gpu{gpu}"
        if _digits(gpu)
        else f"{node}/gpu-{gpu}"
        if gpu in _KINDS
        else f"{node}/{gpu}"
    )
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
        k, (value, _) = key(_labels(s)), _value(s, MAX_SECONDS)
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
        (0, int(part)) if _digits(part) else (1, part.lower())
        for part in re.split(r"([0-9]+)", text)
        if part
    )


def _digits(text: str) -> bool:
    """ASCII digits only: ``str.isdigit`` is true of "²" too, which ``int()`` refuses."""
    return text.isascii() and text.isdigit()


_Series = dict[str, Any]  # {"metric": {label: value}, "value": [time, "figure"]}


def _slim(series: Mapping[str, Any]) -> _Series:
    """A series with only the labels read: what a read keeps of each answer."""
    metric = series.get("metric")
    labels = (
        {k: metric[k] for k in _USED_LABELS & metric.keys()} if isinstance(metric, dict) else {}
    )
    return {"metric": labels, "value": series.get("value")}


def _labels(series: Mapping[str, Any]) -> dict[str, str]:
    """The series' labels, each value cut to MAX_LABEL characters and shown safely."""
    metric = series.get("metric")
    if not isinstance(metric, dict):
        return {}
    return {k: _label(v) for k, v in metric.items() if isinstance(k, str) and isinstance(v, str)}


def _label(value: str) -> str:
    cut = value if len(value) <= MAX_LABEL else value[: MAX_LABEL - 1] + "…"
    return visible(cut)


def _value(series: Mapping[str, Any], limit: float) -> tuple[float | None, str | None]:
    """(the sample's value, None); (None, why) when it is no number, NaN, infinite or outside
    0..``limit`` (checked before any arithmetic); (None, None) when the sample has no value."""
    pair = series.get("value")
    if not isinstance(pair, list) or len(pair) != 2:
        return None, None
    try:
        return float(checked_number(pair[1], low=0, high=limit)), None
    except NumberError as err:
        return None, str(err)


def _int(text: str | None) -> int | None:
    return int(text) if text is not None and _digits(text) and len(text) <= 9 else None


def _json(body: bytes) -> Any:
    """The parsed body, or None when it is not JSON (or nested too deep to parse)."""
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        return None


def _api_error(answer: Any) -> str:
    """The error an API answer gives (only text is taken: no repr of a server's lists)."""
    text = answer.get("error") if isinstance(answer, dict) else None
    if isinstance(text, str) and text:
        kind = answer.get("errorType")
        return f"{_line(kind, 40)}: {text}" if isinstance(kind, str) and kind else text
    return "not a Prometheus API answer"


def _line(text: str, limit: int = 200) -> str:
    """``text`` from a server or an exception as one safe line: its first line, cut."""
    lines = text.strip().splitlines()
    first = lines[0] if lines else ""
    return visible(first if len(first) <= limit else first[: limit - 1] + "…")


def _timed_out(err: BaseException) -> bool:
    reason = err.reason if isinstance(err, urllib.error.URLError) else err
    return isinstance(reason, TimeoutError)


def _reason(err: BaseException) -> str:
    """Why a request failed, in words: the OS's (``Connection refused``), else http.client's
    (``IncompleteRead``, ``BadStatusLine``), with its text when it has one."""
    reason = err.reason if isinstance(err, urllib.error.URLError) else err
    if isinstance(reason, OSError) and reason.strerror:
        return reason.strerror
    if isinstance(reason, str):
        return reason or type(err).__name__
    name = type(reason).__name__
    if isinstance(reason, http.client.IncompleteRead):
        return f"{name}: the answer was cut short"
    if isinstance(reason, http.client.RemoteDisconnected):
        return f"{name}: the server closed the connection without an answer"
    text = _line(str(reason), 120)
    if isinstance(reason, http.client.BadStatusLine):
        return f"{name}: not an HTTP answer ({text})" if text else name
    return f"{name}: {text}" if text and text != "None" else name


def _read_until(response: Any, deadline: float, limit: int = MAX_ANSWER_BYTES) -> bytes:
    """The body, read in pieces so a server that trickles cannot outlast the deadline, and
    refused past ``limit`` bytes."""
    chunks: list[bytes] = []
    size = 0
    while True:
        if time.monotonic() > deadline:
            raise TimeoutError
        chunk = response.read1(64 * 1024) if hasattr(response, "read1") else response.read()
        if not chunk:
            # read1() returns b"" when the server closes early; read() would have said so.
            if getattr(response, "length", None):
                raise http.client.IncompleteRead(b"".join(chunks), response.length)
            return b"".join(chunks)
        size += len(chunk)
        if size > limit:
            whole = limit == MAX_ANSWER_BYTES
            raise _Refused(
                f"the answer is larger than {MAX_ANSWER_BYTES // MiB} MiB"
                if whole
                else f"the answers are larger than {MAX_READ_BYTES // MiB} MiB together"
            )
        chunks.append(chunk)
