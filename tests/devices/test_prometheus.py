"""PrometheusSource against a loopback fake Prometheus (127.0.0.1 only): mapping dcgm-exporter
and node_exporter answers to readings, label filters, auth, and every way a server fails."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from prom_fixtures import (
    GPUS,
    FakePrometheus,
    MiB,
    dcgm_labels,
    gpu_series,
    refused_url,
    series,
    serve_fake,
    wait_for,
)

from trainmem.devices import DeviceReading, Sampler, Snapshot
from trainmem.devices.prometheus import PrometheusError, PrometheusSource, map_readings
from trainmem.devices.promql import check_select, check_url, host_of, node_of, queries


@pytest.fixture(autouse=True)
def _no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    # urllib honours proxy variables; every test talks to 127.0.0.1 directly.
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    for name in ("TOKEN", "USER", "PASSWORD"):
        monkeypatch.delenv(f"TRAINMEM_PROMETHEUS_{name}", raising=False)


@pytest.fixture
def prom() -> Iterator[FakePrometheus]:
    yield from serve_fake()


def by_id(readings: tuple[DeviceReading, ...]) -> dict[str, DeviceReading]:
    return {d.id: d for d in readings}


def test_every_node_gpus_and_ram_in_bytes(prom: FakePrometheus) -> None:
    readings = PrometheusSource(prom.url, env={}).read()
    # Natural node order (node-2 before node-10), each node's GPUs then its RAM.
    assert [d.id for d in readings] == [
        "node-1/gpu0",
        "node-1/gpu1",
        "node-1/system",
        "node-2/gpu0",
        "node-2/gpu1",
        "node-2/system",
        "node-10/gpu0",
        "node-10/gpu1",
        "node-10/system",
    ]
    d = by_id(readings)
    gpu = d["node-1/gpu0"]
    # dcgm reports MiB; used counts the reserved part, as NVML's figure does.
    assert gpu.used_bytes == (70_000 + 527) * MiB
    assert gpu.free_bytes == 11_032 * MiB
    assert gpu.total_bytes == gpu.usable_bytes == 81_559 * MiB
    assert gpu.reserved_bytes == 527 * MiB
    assert gpu.kind == "gpu" and gpu.name == "NVIDIA H100 80GB HBM3" and gpu.index == 0
    assert gpu.uuid == "GPU-node-1-0-0000-0000-000000000000"
    assert [(p.pid, p.name) for p in gpu.processes] == [(0, "train/llama-sft-0")]
    assert d["node-1/gpu1"].processes == ()
    ram = d["node-2/system"]
    assert ram.kind == "system" and ram.total_bytes == 2048 * 2**30
    assert ram.free_bytes == 100 * 2**30 and ram.used_bytes == 1948 * 2**30
    assert all(r.stale_s is None and r.unavailable is None for r in readings)
    assert node_of("node-10/gpu1") == "node-10" and node_of("gpu0") is None


def test_the_queries_sent_and_the_label_filter_in_each(prom: FakePrometheus) -> None:
    select = 'job=~"dcgm|node",Hostname=~"node-[0-3]"'
    PrometheusSource(prom.url, select=select, env={}).read()
    assert prom.queries == list(queries(select).values())
    assert prom.queries == [
        '{__name__=~"DCGM_FI_DEV_FB_USED|DCGM_FI_DEV_FB_FREE|DCGM_FI_DEV_FB_RESERVED",'
        + select
        + "}",
        "timestamp(DCGM_FI_DEV_FB_USED{" + select + "})",
        '{__name__=~"node_memory_MemTotal_bytes|node_memory_MemAvailable_bytes",' + select + "}",
        "timestamp(node_memory_MemAvailable_bytes{" + select + "})",
        '{__name__=~"trainmem_device_total_bytes|trainmem_device_used_bytes|'
        "trainmem_device_free_bytes|trainmem_device_usable_bytes|trainmem_device_up|"
        'trainmem_device_stale_seconds",' + select + "}",
        "timestamp(trainmem_device_up{" + select + "})",
    ]
    assert queries("")["gpu_time"] == "timestamp(DCGM_FI_DEV_FB_USED)"


@pytest.mark.parametrize(
    ("given", "kept"),
    [
        ('job="dcgm"', 'job="dcgm"'),
        ('{job="dcgm", Hostname=~"node-[0-3]"}', 'job="dcgm", Hostname=~"node-[0-3]"'),
        ('job!="x",', 'job!="x"'),
        (r'pod=~"a\"b"', r'pod=~"a\"b"'),
        ("", ""),
    ],
)
def test_label_filters_accepted(given: str, kept: str) -> None:
    assert check_select(given) == kept


@pytest.mark.parametrize(
    "bad",
    ['job="a"} or vector(1) or {x="', "job=dcgm", 'job="a" job="b"', '1job="a"', 'job=="a"'],
)
def test_label_filters_that_would_change_the_query_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="label matchers"):
        check_select(bad)


def test_urls() -> None:
    assert (
        check_url("https://prom.example:9090/prometheus/") == "https://prom.example:9090/prometheus"
    )
    for bad, why in [
        ("ftp://x", "http"),
        ("prom:9090", "http"),
        ("http://u:p@x", "not the URL"),
        ("http://x/?a=1", "query"),
    ]:
        with pytest.raises(ValueError, match=why):
            check_url(bad)
    assert host_of("node-1:9100") == "node-1" and host_of("[fe80::1]:9100") == "fe80::1"


def test_bearer_token_and_basic_auth_from_the_environment(prom: FakePrometheus) -> None:
    PrometheusSource(prom.url, env={"TRAINMEM_PROMETHEUS_TOKEN": "s3cret"}).read()
    assert prom.behaviour.requests[0][1]["Authorization"] == "Bearer s3cret"
    prom.behaviour.requests.clear()
    env = {"TRAINMEM_PROMETHEUS_USER": "ops", "TRAINMEM_PROMETHEUS_PASSWORD": "pw"}
    PrometheusSource(prom.url, env=env).read()
    sent = prom.behaviour.requests[0][1]["Authorization"]
    assert base64.b64decode(sent.removeprefix("Basic ")) == b"ops:pw"
    both = PrometheusSource(prom.url, env={**env, "TRAINMEM_PROMETHEUS_TOKEN": "t"})
    with pytest.raises(PrometheusError, match="not both"):
        both.read()


def test_refused_login_says_what_to_set(prom: FakePrometheus) -> None:
    prom.behaviour.status, prom.behaviour.body = 401, b"Unauthorized"
    with pytest.raises(PrometheusError, match=r"HTTP 401.*TRAINMEM_PROMETHEUS_TOKEN"):
        PrometheusSource(prom.url, env={}).read()
    with pytest.raises(PrometheusError, match="credentials from the environment were refused"):
        PrometheusSource(prom.url, env={"TRAINMEM_PROMETHEUS_TOKEN": "s3cret"}).read()


def test_a_slow_server_times_out_within_the_deadline(prom: FakePrometheus) -> None:
    prom.behaviour.delay = 5.0
    source = PrometheusSource(prom.url, timeout=0.3, env={})
    t0 = time.monotonic()
    with pytest.raises(PrometheusError, match=r"timed out after 0.3 s"):
        source.read()
    assert time.monotonic() - t0 < 1.5


def test_server_errors_are_one_line(prom: FakePrometheus) -> None:
    source = PrometheusSource(prom.url, env={})
    prom.behaviour.status, prom.behaviour.body = 500, b"<html>oops</html>"
    with pytest.raises(PrometheusError, match=r"HTTP 500 Internal Server Error$"):
        source.read()
    error = {"status": "error", "errorType": "execution", "error": "query timed out\nmore"}
    prom.behaviour.status, prom.behaviour.body = 503, json.dumps(error).encode()
    with pytest.raises(PrometheusError, match=r"HTTP 503: execution: query timed out$"):
        source.read()
    prom.behaviour.status, prom.behaviour.body = 200, b"<html>login</html>"
    with pytest.raises(PrometheusError, match="not JSON"):
        source.read()
    with pytest.raises(
        PrometheusError,
        match=r"^cannot read Prometheus at http://127.0.0.1:\d+: Connection refused$",
    ):
        PrometheusSource(refused_url(), env={}).read()


def test_a_redirect_is_not_followed_with_the_token(prom: FakePrometheus) -> None:
    # nor offered as the URL to give: the path it names is the query's, not a base URL
    prom.behaviour.redirect = "http://127.0.0.1:1/elsewhere/api/v1/query?query=up"
    with pytest.raises(PrometheusError) as caught:
        PrometheusSource(prom.url, env={"TRAINMEM_PROMETHEUS_TOKEN": "t"}).read()
    assert "a redirect (HTTP 302, to http://127.0.0.1:1), which is not followed" in str(
        caught.value
    )
    assert "/api/v1" not in str(caught.value).split("redirect")[1]
    assert len(prom.behaviour.requests) == 1


def test_no_series_at_all_names_the_filter(prom: FakePrometheus) -> None:
    prom.behaviour.gpu, prom.behaviour.ram = [], []
    with pytest.raises(PrometheusError, match=r'no DCGM_FI_DEV_FB_USED.*matching \{job="x"\}'):
        PrometheusSource(prom.url, select='job="x"', env={}).read()


def test_partial_answers() -> None:
    labels = dcgm_labels("node-1", 0, None)
    no_host = {k: v for k, v in labels.items() if k != "Hostname"}  # falls back to instance
    no_gpu = {k: v for k, v in labels.items() if k not in ("gpu", "device")}  # to the UUID
    nameless = {"job": "dcgm"}  # neither node nor GPU: left out
    answers = {
        "gpu": [
            series("DCGM_FI_DEV_FB_USED", {**labels, "gpu": "3"}, "NaN"),
            series("DCGM_FI_DEV_FB_FREE", {**labels, "gpu": "3"}, 100),
            series("DCGM_FI_DEV_FB_USED", no_host, 10),
            series("DCGM_FI_DEV_FB_FREE", no_host, 20),  # no RESERVED series: an older dcgm
            series("DCGM_FI_DEV_FB_USED", {**no_gpu, "Hostname": "node-2"}, 1),
            series("DCGM_FI_DEV_FB_FREE", {**no_gpu, "Hostname": "node-2"}, "+Inf"),
            series("DCGM_FI_DEV_FB_USED", nameless, 1),
        ],
        "ram": [
            series("node_memory_MemTotal_bytes", {"instance": "node-1.cluster.local:9100"}, 4e9),
            series(
                "node_memory_MemAvailable_bytes", {"instance": "node-1.cluster.local:9100"}, 1e9
            ),
            series("node_memory_MemTotal_bytes", {"instance": "10.0.0.7:9100"}, 8e9),
            series("node_memory_MemAvailable_bytes", {"job": "node"}, 1e9),  # no instance
        ],
    }
    d = by_id(map_readings(answers, now=0.0))
    assert set(d) == {
        "node-1/gpu0",
        "node-1/gpu3",
        "node-1/system",
        "node-2/GPU-node-1-0-0000-0000-000000000000",
        "10.0.0.7/system",
    }
    assert d["node-1/gpu3"].unavailable == "DCGM_FI_DEV_FB_USED: 'NaN' is not a finite number"
    assert d["node-1/gpu0"].total_bytes == 30 * MiB and d["node-1/gpu0"].reserved_bytes is None
    assert d["node-2/GPU-node-1-0-0000-0000-000000000000"].unavailable == (
        "DCGM_FI_DEV_FB_FREE: '+Inf' is not a finite number"
    )
    # node_exporter's FQDN instance joins dcgm's short Hostname; an IP stays its own node.
    assert d["node-1/system"].used_bytes == 3_000_000_000
    assert d["10.0.0.7/system"].unavailable == "no node_memory_MemAvailable_bytes value"


def test_old_samples_are_marked_stale_with_their_age(prom: FakePrometheus) -> None:
    prom.behaviour.age = 300.0
    readings = PrometheusSource(prom.url, env={}, stale_after_s=90).read()
    assert all(r.stale_s is not None and 299 < r.stale_s < 310 for r in readings)
    prom.behaviour.age = 30.0  # within a scrape interval or two: fresh
    assert all(r.stale_s is None for r in PrometheusSource(prom.url, env={}).read())


def test_a_node_that_disappears_and_comes_back(prom: FakePrometheus) -> None:
    source = PrometheusSource(prom.url, env={})
    assert len(source.read()) == 9
    prom.behaviour.nodes = {"node-1", "node-10"}
    gone = by_id(source.read())
    assert len(gone) == 9  # still listed, so panes do not jump
    for device in ("node-2/gpu0", "node-2/gpu1", "node-2/system"):
        assert gone[device].unavailable is not None
        assert gone[device].unavailable.startswith("missing from Prometheus's answers for")
        assert gone[device].used_bytes is None
    assert gone["node-1/gpu0"].unavailable is None
    prom.behaviour.nodes = None
    back = by_id(source.read())
    assert back["node-2/gpu0"].unavailable is None
    assert back["node-2/gpu0"].used_bytes == (40_000 + 527) * MiB
    # Forgotten after forget_after_s.
    source.forget_after_s = 0.0
    prom.behaviour.nodes = {"node-1"}
    time.sleep(0.01)
    assert {d.id.split("/")[0] for d in source.read()} == {"node-1"}


def test_several_pods_on_one_gpu(prom: FakePrometheus) -> None:
    shared = gpu_series({"node-1"})
    shared += [
        series(s["metric"]["__name__"], {**s["metric"], "pod": "other-0"}, s["value"][1])
        for s in gpu_series({"node-1"})
        if s["metric"]["gpu"] == "0"
    ]
    prom.behaviour.gpu = shared
    gpu = by_id(PrometheusSource(prom.url, env={}).read())["node-1/gpu0"]
    assert [p.name for p in gpu.processes] == ["train/llama-sft-0", "train/other-0"]


# -- in the sampler: a slow or failing Prometheus holds back nothing -------------------------


def test_in_the_sampler_a_hung_server_goes_stale_then_a_failing_one_unavailable(
    prom: FakePrometheus,
) -> None:
    snaps: list[Snapshot] = []
    source = PrometheusSource(prom.url, timeout=2.0, env={})
    sampler = Sampler(snaps.append, interval=0.1, extra_sources=(source,), local=False)
    sampler.start()
    try:
        assert wait_for(lambda: any(len(s.devices) == 9 for s in snaps), 3.0)
        assert snaps[-1].nvml.reason == "not read: remote devices only"
        prom.behaviour.delay = 10.0  # hangs: the clock keeps publishing, marked stale
        stale = wait_for(lambda: [s for s in snaps if s.devices[0].stale_s], 2.0)
        assert stale and stale[-1].devices[0].used_bytes == (70_000 + 527) * MiB
        prom.behaviour.delay, prom.behaviour.status = 0.0, 500
        prom.behaviour.body = b"down"
        prom.behaviour.release.set()  # the hung read returns (with the 500)
        failed = wait_for(lambda: [s for s in snaps if s.devices[0].unavailable], 3.0)
        reason = failed[-1].devices[0].unavailable
        assert reason is not None and reason.endswith("HTTP 500 Internal Server Error")
        assert "\n" not in reason and "Traceback" not in reason
    finally:
        sampler.stop(timeout=1.0)


def test_before_the_first_answer_a_ghost_says_so(prom: FakePrometheus) -> None:
    prom.behaviour.delay = 10.0
    source = PrometheusSource(prom.url, timeout=5.0, env={})
    sampler = Sampler(None, interval=0.1, extra_sources=(source,), local=False)
    snap = sampler._publish()  # what the clock publishes while the first read is under way
    assert [d.id for d in snap.devices] == ["prometheus"]
    assert snap.devices[0].unavailable == "no answer from prometheus yet"


# -- `devices --prometheus URL` ----------------------------------------------------------------


SCRIPT = """
import sys
from trainmem.cli.main import main
raise SystemExit(main(sys.argv[1:]))
"""


def run_cli(*argv: str, **extra_env: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "NO_COLOR": "1", "COLUMNS": "120", **extra_env}
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, "devices", *argv],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
        check=False,
    )


def test_devices_prometheus_json_and_table(prom: FakePrometheus) -> None:
    out = run_cli("--prometheus", prom.url, "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    ids = [d["id"] for d in data["devices"]]
    assert len(ids) == len(GPUS) + 3 and "node-10/system" in ids
    gpu = next(d for d in data["devices"] if d["id"] == "node-10/gpu0")
    assert gpu["used_bytes"] == (80_900 + 527) * MiB and gpu["free_bytes"] == 132 * MiB
    table = run_cli("--prometheus", prom.url)
    assert table.returncode == 0 and "node-2/gpu1" in table.stdout
    assert f"Read from Prometheus at {prom.url}" in table.stdout


def test_devices_prometheus_unreachable_exits_1_in_one_line() -> None:
    out = run_cli("--prometheus", refused_url(), "--json")
    assert out.returncode == 1
    assert out.stderr.count("\n") == 1 and "Connection refused" in out.stderr
    assert json.loads(out.stdout)["devices"][0]["unavailable"].startswith(
        "cannot read Prometheus at"
    )


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--prometheus", "prom:9090"], "is not an http:// or https:// URL"),
        (["--prometheus", "http://x", "--select", "job"], "is not a list of label matchers"),
        (["--select", 'job="x"'], "--select needs --prometheus"),
        (["--model", "7B"], "plan flags need --serve"),
    ],
)
def test_bad_flags(argv: list[str], needle: str) -> None:
    out = run_cli(*argv)
    assert out.returncode == 2 and needle in out.stderr


# -- bounds on what a server (or the environment) can make a read do -------------------------


def test_a_broken_token_is_refused_without_showing_it(prom: FakePrometheus) -> None:
    # a token read from a two-line file: urllib's ValueError quoted the header, secret included
    env = {"TRAINMEM_PROMETHEUS_TOKEN": "s3cr3t\nx"}
    with pytest.raises(PrometheusError, match="control or non-ASCII character") as caught:
        PrometheusSource(prom.url, env=env).read()
    assert "s3cr3t" not in str(caught.value) and not prom.behaviour.requests
    out = run_cli("--prometheus", prom.url, "--json", TRAINMEM_PROMETHEUS_TOKEN="s3cr3t\nx")
    assert out.returncode == 2 and "s3cr3t" not in out.stdout + out.stderr
    assert "TRAINMEM_PROMETHEUS_TOKEN holds a control" in out.stderr
    # a trailing line break (echo > file) is no part of a token
    PrometheusSource(prom.url, env={"TRAINMEM_PROMETHEUS_TOKEN": "s3cr3t\n"}).read()
    assert prom.behaviour.requests[0][1]["Authorization"] == "Bearer s3cr3t"


def test_urls_are_checked_as_they_will_be_sent() -> None:
    # full-width letters pass IDNA as "localhost"; http.client could not encode them
    assert check_url("http://\uff4c\uff4f\uff43\uff41\uff4c\uff48\uff4f\uff53\uff54:9090") == (
        "http://localhost:9090"
    )
    assert check_url("http://[::1]:9090/prom/") == "http://[::1]:9090/prom"
    with pytest.raises(ValueError, match=re.escape("percent-encoded (/pr%C3%A9%20fix)")):
        check_url("http://127.0.0.1:9090/pr\u00e9 fix")


def test_label_filters_are_bounded() -> None:
    with pytest.raises(ValueError, match="characters long; at most 4,096"):
        check_select('job="' + "x" * 5000 + '"')
    with pytest.raises(ValueError, match="not a list of label matchers"):
        check_select('a="b"' + " " * 4000 + "x")  # two \s* met here: quadratic to refuse
    assert check_select('job="dcgm" , Hostname=~"n.*" ,  ') == 'job="dcgm" , Hostname=~"n.*"'


def test_an_answer_of_too_many_series_is_refused(prom: FakePrometheus) -> None:
    labels = dcgm_labels("node-1", 0, None)
    one = series("DCGM_FI_DEV_FB_USED", {"Hostname": "n", "gpu": "0"}, 1)
    prom.behaviour.gpu = [series("DCGM_FI_DEV_FB_USED", labels, 1), *[one] * 40_000]
    with pytest.raises(PrometheusError, match=r"40,001 series answer .* over 40,000: narrow"):
        PrometheusSource(prom.url, env={}).read()


def test_the_answers_of_one_read_share_a_byte_budget(
    prom: FakePrometheus, monkeypatch: pytest.MonkeyPatch
) -> None:
    import trainmem.devices.prometheus as prometheus

    whole = PrometheusSource(prom.url, env={})
    whole.read()
    # each answer is under the budget, the six together are not
    monkeypatch.setattr(prometheus, "MAX_READ_BYTES", whole.bytes_read - 50)  # times vary
    with pytest.raises(PrometheusError, match="answers are larger than"):
        PrometheusSource(prom.url, env={}).read()


def test_only_the_labels_read_are_kept() -> None:
    from trainmem.devices.prometheus import _slim

    labels = {**dcgm_labels("node-1", 0, "train/a"), **{f"extra{i}": "x" * 100 for i in range(30)}}
    slim = _slim(series("DCGM_FI_DEV_FB_USED", labels, 5))
    assert set(slim["metric"]) == {
        "__name__",
        "gpu",
        "UUID",
        "device",
        "modelName",
        "Hostname",
        "instance",
        "namespace",
        "pod",
    }
    assert _slim({"metric": "nope", "value": 1}) == {"metric": {}, "value": 1}


def test_a_gpu_labelled_system_keeps_its_own_id() -> None:
    # it replaced the node's RAM reading, silently
    labels = {"Hostname": "node-1", "gpu": "system"}
    answers = {
        "gpu": [
            series("DCGM_FI_DEV_FB_USED", labels, 10),
            series("DCGM_FI_DEV_FB_FREE", labels, 20),
        ],
        "ram": [
            series("node_memory_MemTotal_bytes", {"instance": "node-1:9100"}, 100),
            series("node_memory_MemAvailable_bytes", {"instance": "node-1:9100"}, 50),
        ],
    }
    readings = by_id(map_readings(answers, now=time.time()))
    assert readings["node-1/system"].kind == "system"
    assert readings["node-1/gpu-system"].kind == "gpu"


def test_devices_that_come_and_go_are_remembered_up_to_a_bound(
    prom: FakePrometheus, monkeypatch: pytest.MonkeyPatch
) -> None:
    import trainmem.devices.prometheus as prometheus

    monkeypatch.setattr(prometheus, "MAX_DEVICES", 12)
    source = PrometheusSource(prom.url, env={})
    first = {d.id for d in source.read()}  # 9: six GPUs and three nodes' RAM
    prom.behaviour.nodes = {"node-1"}
    renamed = []
    for i in range(3):  # node-1's two GPUs as three new nodes' each
        for one in gpu_series({"node-1"}):
            one["metric"]["Hostname"] = f"new-{i}"
            renamed.append(one)
    prom.behaviour.gpu = renamed
    listed = {d.id for d in source.read()}
    assert len(listed) == 12  # 7 now (6 GPUs, node-1's RAM) and of 8 gone, the 5 last seen
    assert {d for d in listed if d.startswith("new-")} and len(first & listed) < len(first)
