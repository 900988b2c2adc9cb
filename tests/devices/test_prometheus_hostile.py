"""A broken or hostile "Prometheus" on 127.0.0.1: every failure of the HTTP exchange is one
line, "cannot read Prometheus at URL: why", with nothing raw from the server in it; labels
and values from the answers are bounded, range-checked and shown safely in every output.

The raw server (``Hostile``) answers each connection with a script of bytes, is started by the
test and stops by itself (on close, or after ``LIFETIME_S`` at the latest).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from prom_fixtures import FakePrometheus, dcgm_labels, series, serve_fake

from trainmem.cli.main import main
from trainmem.devices.prometheus import MAX_LABEL, PrometheusError, PrometheusSource

LIFETIME_S = 20.0  # no hostile server outlives this, whatever a test does
Script = Callable[[socket.socket, threading.Event], None]


class Hostile:
    """A TCP server on 127.0.0.1 running ``script`` on each connection it accepts."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.stop = threading.Event()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.05)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.born = time.monotonic()
        threading.Thread(target=self._serve, daemon=True).start()

    def _alive(self) -> bool:
        return not self.stop.is_set() and time.monotonic() - self.born < LIFETIME_S

    def _serve(self) -> None:
        while self._alive():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()
        self.sock.close()

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(1.0)
            try:
                _read_request(conn)
                self.script(conn, self.stop)
            except OSError:
                pass  # the client gave up: expected in the timeout cases

    def close(self) -> None:
        self.stop.set()


def _read_request(conn: socket.socket) -> None:
    data = b""
    while b"\r\n\r\n" not in data and len(data) < 65536:
        chunk = conn.recv(4096)
        if not chunk:
            return
        data += chunk


def reply(raw: bytes, *, then_close: bool = True) -> Script:
    def script(conn: socket.socket, stop: threading.Event) -> None:
        conn.sendall(raw)
        if not then_close:
            stop.wait(LIFETIME_S)

    return script


def http(body: bytes, status: str = "200 OK", headers: str = "") -> bytes:
    head = f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
    head += f"Content-Length: {len(body)}\r\nConnection: close\r\n{headers}\r\n"
    return head.encode("latin-1") + body


def silent(conn: socket.socket, stop: threading.Event) -> None:
    stop.wait(LIFETIME_S)  # accepts, reads the request, never answers


def trickle(conn: socket.socket, stop: threading.Event) -> None:
    """A status line, then a header one byte every 50 ms: each wait is short, the whole long."""
    conn.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
    while not stop.wait(0.05):
        conn.sendall(b"a")


def hang_up(conn: socket.socket, stop: threading.Event) -> None:
    pass  # closes the connection without a byte


@pytest.fixture
def hostile() -> Iterator[Callable[[Script], Hostile]]:
    servers: list[Hostile] = []

    def start(script: Script) -> Hostile:
        servers.append(Hostile(script))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


@pytest.fixture(autouse=True)
def _no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    for name in ("TOKEN", "USER", "PASSWORD"):
        monkeypatch.delenv(f"TRAINMEM_PROMETHEUS_{name}", raising=False)


def one_line_error(url: str, timeout: float = 2.0) -> str:
    with pytest.raises(PrometheusError) as err:
        PrometheusSource(url, env={}, timeout=timeout).read()
    text = str(err.value)
    assert text.startswith(f"cannot read Prometheus at {url}: "), text
    assert text.isprintable() and "\x1b" not in text, text  # one line, nothing raw
    return text.removeprefix(f"cannot read Prometheus at {url}: ")


NESTED = b"[" * 30_000 + b"]" * 30_000  # deeper than the parser goes, fewer than 40,000 series
# Three bytes a series, parsed 64 or more: refused as more than 40,000 series can hold
CROWDED = b'{"status":"success","data":{"resultType":"vector","result":[' + b"{}," * 2_000_000

BROKEN: list[tuple[str, Script, str]] = [
    (
        "incomplete read",
        reply(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + b'{"status": "succ'),
        "IncompleteRead: the answer was cut short",
    ),
    ("bad status line", reply(b"HELLO THERE\r\n\r\n"), "BadStatusLine: not an HTTP answer"),
    ("hung up", hang_up, "RemoteDisconnected: the server closed the connection"),
    ("broken JSON", reply(http(b'{"status": "success", "data": {')), "the answer is not JSON"),
    ("nested JSON", reply(http(NESTED)), "the answer is not JSON"),
    (
        "crowded JSON",
        reply(http(CROWDED + b"{}]}}")),
        "more than 40,000 series can ({ x 2,000,003)",
    ),
    (
        "broken chunks",
        reply(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"),
        "IncompleteRead",
    ),
    (
        "header too long",
        reply(b"HTTP/1.1 200 OK\r\nX-Long: " + b"a" * 70_000 + b"\r\n\r\n"),
        "LineTooLong",
    ),
    (
        "too many headers",
        reply(b"HTTP/1.1 200 OK\r\n" + b"X-A: b\r\n" * 200 + b"\r\n"),
        "HTTPException: got more than 100 headers",
    ),
    (
        "escapes in the reason",
        reply(http(b"x", status="500 \x1b]0;pwned\x07\x1b[2J")),
        "HTTP 500 \\x1b]0;pwned\\x07\\x1b[2J",
    ),
    (
        "escapes in an API error",
        reply(http(json.dumps({"status": "error", "error": "\x1b[2Jgone\nline 2"}).encode())),
        "\\x1b[2Jgone",
    ),
    (
        "escapes in a redirect",
        reply(http(b"", status="302 Found", headers="Location: http://x\x1bc\x07/y\r\n")),
        "a redirect (HTTP 302, to http://x%1Bc%07), which is not followed",
    ),
    ("a silent server", silent, "timed out after 0.5 s"),
    ("a server that trickles its headers", trickle, "timed out after 0.5 s"),
]


@pytest.mark.parametrize(("case", "script", "why"), BROKEN, ids=[c[0] for c in BROKEN])
def test_every_broken_answer_is_one_line(
    hostile: Callable[[Script], Hostile], case: str, script: Script, why: str
) -> None:
    server = hostile(script)
    assert why in one_line_error(server.url, timeout=0.5)


def test_the_command_says_it_in_one_line_and_exits_1(
    hostile: Callable[[Script], Hostile], capsys: pytest.CaptureFixture[str]
) -> None:
    server = hostile(reply(b"HELLO\r\n\r\n"))
    assert main(["devices", "--prometheus", server.url]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"cannot read Prometheus at {server.url}: BadStatusLine" in err


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://prom:99999", "the port must be a number in 1..65535"),
        ("http://prom:-1", "the port must be a number in 1..65535"),
        ("http://prom:abc", "the port must be a number in 1..65535"),
        ("http://prom:0", "the port must be a number in 1..65535"),
        ("http://prom:", "the port must be a number in 1..65535"),
        ("http://a..b:9090", "'a..b' is not a valid host name"),
        ("http://-x:9090", "is not a valid host name"),
        ("http://[zz]:9090", "is not a valid URL"),
        ("http://[::1:9090", "is not a valid URL"),
        ("http://pr\x1bom:9090", "has control characters"),
        ("http://" + "a" * 3000, "characters long"),
    ],
)
def test_urls_checked_before_any_request(
    url: str, why: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit:
        main(["devices", "--prometheus", url])
    assert exit.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert why in err and "\x1b" not in err and "Traceback" not in err


# -- what the answers hold ---------------------------------------------------------------------


@pytest.fixture
def prom() -> Iterator[FakePrometheus]:
    yield from serve_fake()


def gpu(labels: dict[str, str], used: Any, free: Any, reserved: Any = "0") -> list[dict[str, Any]]:
    return [
        series("DCGM_FI_DEV_FB_USED", labels, used),
        series("DCGM_FI_DEV_FB_FREE", labels, free),
        series("DCGM_FI_DEV_FB_RESERVED", labels, reserved),
    ]


def by_id(prom: FakePrometheus) -> dict[str, Any]:
    return {d.id: d for d in PrometheusSource(prom.url, env={}).read()}


@pytest.mark.parametrize(
    ("used", "free", "why"),
    [
        ("1.7e308", "10", "DCGM_FI_DEV_FB_USED: 1.7e+308 is outside 0..16,777,216"),
        ("10", "1e300", "DCGM_FI_DEV_FB_FREE: 1e+300 is outside 0..16,777,216"),
        ("NaN", "10", "DCGM_FI_DEV_FB_USED: 'NaN' is not a finite number"),
        ("10", "-Inf", "DCGM_FI_DEV_FB_FREE: '-Inf' is not a finite number"),
        ("-5", "10", "DCGM_FI_DEV_FB_USED: -5 is outside 0..16,777,216"),
        ("1" * 400, "10", "DCGM_FI_DEV_FB_USED: a 400-digit integer is outside 0..16,777,216"),
        ("ten", "10", "DCGM_FI_DEV_FB_USED: 'ten' is not a number"),
    ],
)
def test_figures_are_range_checked_before_arithmetic(
    prom: FakePrometheus, used: Any, free: Any, why: str
) -> None:
    prom.behaviour.gpu = gpu(dcgm_labels("node-1", 0, None), used, free)
    d = by_id(prom)["node-1/gpu0"]
    assert d.unavailable == why and d.total_bytes is None and d.used_bytes is None


def test_a_json_number_of_400_digits(prom: FakePrometheus) -> None:
    """Prometheus sends values as strings; a bare JSON integer is checked as exactly."""
    prom.behaviour.gpu = gpu(dcgm_labels("node-1", 0, None), "10", "10")
    prom.behaviour.gpu[0]["value"][1] = 10**400
    d = by_id(prom)["node-1/gpu0"]
    assert d.unavailable == "DCGM_FI_DEV_FB_USED: a 1329-bit integer is outside 0..16,777,216"


def test_a_huge_reserved_figure_is_no_total_either(prom: FakePrometheus) -> None:
    prom.behaviour.gpu = gpu(dcgm_labels("node-1", 0, None), "10", "10", reserved="1e300")
    d = by_id(prom)["node-1/gpu0"]
    assert d.total_bytes is None and d.unavailable is not None
    assert d.unavailable.startswith("DCGM_FI_DEV_FB_RESERVED: 1e+300 is outside")


def test_huge_ram_and_own_figures(prom: FakePrometheus) -> None:
    prom.behaviour.ram = [
        series("node_memory_MemTotal_bytes", {"instance": "n1:9100"}, "1.7e308"),
        series("node_memory_MemAvailable_bytes", {"instance": "n1:9100"}, "1e9"),
    ]
    own = {"instance": "n2:9400", "device": "gpu0", "kind": "gpu", "name": "x"}
    prom.behaviour.own = [
        series("trainmem_device_up", own, "1"),
        series("trainmem_device_total_bytes", own, "1e300"),
        series("trainmem_device_used_bytes", own, "1"),
        series("trainmem_device_free_bytes", own, "1"),
        series("trainmem_device_usable_bytes", own, "1"),
    ]
    d = by_id(prom)
    assert d["n1/system"].total_bytes is None
    assert d["n1/system"].unavailable.startswith("node_memory_MemTotal_bytes: 1.7e+308 is outside")
    assert d["n2/gpu0"].total_bytes is None
    assert d["n2/gpu0"].unavailable.startswith("trainmem_device_total_bytes: 1e+300 is outside")


HOSTILE_LABELS = {
    "Hostname": "\x1b]52;c;aGVsbG8=\x07n1\x1b[2J",  # OSC 52 clipboard write, clear screen
    "modelName": "[/]H100 [bold red]x[/bold red]",  # closing a tag never opened: MarkupError
    "instance": "[",  # urlsplit: "Invalid IPv6 URL"
    "pod": "[/dim]p\x9b31m",  # C1 CSI
    "namespace": "ns",
    "gpu": "0",
}


def test_labels_with_escapes_markup_and_brackets_are_shown_visibly(
    prom: FakePrometheus, capsys: pytest.CaptureFixture[str]
) -> None:
    prom.behaviour.gpu = gpu(HOSTILE_LABELS, "10", "20")
    prom.behaviour.ram = [
        series("node_memory_MemTotal_bytes", {"instance": "[\x1b]0;t\x07:9100"}, "4e9"),
        series("node_memory_MemAvailable_bytes", {"instance": "[\x1b]0;t\x07:9100"}, "1e9"),
    ]
    (d,) = (r for r in PrometheusSource(prom.url, env={}).read() if r.kind == "gpu")
    assert d.id == "\\x1b]52;c;aGVsbG8=\\x07n1\\x1b[2J/gpu0"
    assert d.name == "[/]H100 [bold red]x[/bold red]"
    assert d.processes[0].name == "ns/[/dim]p\\x9b31m"
    for argv in (["--prometheus", prom.url], ["--prometheus", prom.url, "--json"]):
        assert main(["devices", *argv]) == 0
        out = capsys.readouterr()
        for raw in ("\x1b", "\x07", "\x9b"):
            assert raw not in out.out and raw not in out.err
    assert main(["devices", "--prometheus", prom.url]) == 0
    table = capsys.readouterr().out
    assert "[/]H100" in table  # rich markup in a label is shown, never interpreted
    assert "\\x1b]52;c;aGVsbG8=" in table


def test_the_watch_stream_shows_labels_safely(
    prom: FakePrometheus, capsys: pytest.CaptureFixture[str]
) -> None:
    prom.behaviour.gpu = gpu(HOSTILE_LABELS, "10", "20")
    prom.behaviour.ram = []
    assert main(["devices", "--prometheus", prom.url, "--watch", "--count", "1"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\\x1b]52" in out


def test_label_values_are_bounded(prom: FakePrometheus) -> None:
    long = {**dcgm_labels("node-1", 0, None), "Hostname": "n" * 100_000, "modelName": "m" * 10**6}
    prom.behaviour.gpu = gpu(long, "10", "20")
    (d,) = (r for r in PrometheusSource(prom.url, env={}).read() if r.kind == "gpu")
    node = d.id.partition("/")[0]
    assert len(node) == MAX_LABEL and node.endswith("…")
    assert len(d.name) == MAX_LABEL


def test_odd_gpu_labels_do_not_break_ordering(prom: FakePrometheus) -> None:
    """``str.isdigit`` is true of "²", which ``int()`` refuses: ids and order stay sane."""
    prom.behaviour.gpu = [
        *gpu({**dcgm_labels("node-1", 0, None), "gpu": "²"}, "10", "20"),
        *gpu({**dcgm_labels("node-1", 1, None), "gpu": "9" * 200}, "10", "20"),
        *gpu({**dcgm_labels("node-1", 0, None), "Hostname": "node²"}, "10", "20"),
    ]
    d = by_id(prom)
    assert d["node-1/²"].index is None and d["node-1/gpu" + "9" * 200].index is None
    assert d["node²/gpu0"].used_bytes == 10 * 2**20


def test_label_values_that_are_not_strings_are_ignored(prom: FakePrometheus) -> None:
    labels: dict[str, Any] = {**dcgm_labels("node-1", 0, None), "modelName": [[["deep"]]]}
    prom.behaviour.gpu = gpu(labels, "10", "20")
    assert by_id(prom)["node-1/gpu0"].name == "GPU"


def test_the_dashboard_panes_show_names_and_commands_visibly() -> None:
    """A process's command line (from /proc) and a cluster's labels reach the device panes as
    Text with escapes shown: nothing a terminal would act on."""
    from trainmem.app.widgets.devices import ClusterPane, DevicePane
    from trainmem.devices.snapshot import DeviceReading, ProcessReading

    proc = ProcessReading(pid=7, used_bytes=2**30, cmdline="python \x1b]52;c;aGk=\x07 [/]x")
    local = DeviceReading(
        "gpu0", "gpu", "H100 \x1b[2J", 80 * 2**30, 2**30, 79 * 2**30, 80 * 2**30, (proc,)
    )
    remote = DeviceReading(
        "n1\x1b[2J/gpu0", "gpu", "x", None, None, None, None, (), "down \x9b31m [/]"
    )
    pane = DevicePane(local)
    cluster = ClusterPane()
    cluster.update_nodes([remote], {})
    for lines in (pane._lines(80), cluster._lines(80)):
        text = "\n".join(line.plain for line in lines)
        assert "\x1b" not in text and "\x9b" not in text and "\x07" not in text
        assert "\\x1b" in text
    assert any("[/]x" in line.plain for line in pane._lines(80))
