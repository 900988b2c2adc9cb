"""--download through huggingface_hub's real code against a Hub stand-in on loopback: config
and headers only, never weights; revisions, offline mode, gated repos. No internet."""

import hashlib
import json
import struct
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar
from urllib.parse import unquote, urlsplit

import pytest
from tiny_model import CONFIG as TINY_CONFIG

from trainmem.cli.main import main
from trainmem.core.architecture import spec_from_config
from trainmem.core.errors import PlanError
from trainmem.sources.hub import DownloadError, download
from trainmem.sources.paths import downloaded_model_dir
from trainmem.sources.resolve import resolve_model

CONFIG = TINY_CONFIG
# The headers count what the config describes (headers of another size are not trusted).
PARAMS = spec_from_config(CONFIG, "tiny").params
PARAMS_4 = spec_from_config({**CONFIG, "num_hidden_layers": 4}, "tiny").params
WEIGHT_BYTES = 300_000  # well past the 100 kB huggingface_hub fetches with a shard's header


def shard(tensors: dict[str, list[int]]) -> bytes:
    header = json.dumps(
        {n: {"dtype": "BF16", "shape": s, "data_offsets": [0, 0]} for n, s in tensors.items()}
    ).encode()
    return struct.pack("<Q", len(header)) + header + b"\xff" * WEIGHT_BYTES


def as_json(value: object) -> bytes:
    return json.dumps(value).encode()


REPOS = {
    "acme/tiny": {
        "main": {
            "config.json": as_json(CONFIG),
            "model.safetensors.index.json": as_json(
                {"weight_map": {"a": "model-1.safetensors", "b": "model-2.safetensors"}}
            ),
            "model-1.safetensors": shard({"a": [PARAMS - 7]}),
            "model-2.safetensors": shard({"b": [7]}),
        },
        "abc123": {  # an older revision: one unsharded file, four layers
            "config.json": as_json({**CONFIG, "num_hidden_layers": 4}),
            "model.safetensors": shard({"a": [PARAMS_4 - 3], "b": [3]}),
        },
    },
    "acme/bare": {"main": {"config.json": as_json(CONFIG)}},  # no safetensors at all
    "acme/gated": {"main": {"config.json": as_json(CONFIG)}},
}
GATED = {"acme/gated"}


def commit_of(repo: str, revision: str) -> str:
    return hashlib.sha1(f"{repo}@{revision}".encode()).hexdigest()


class Hub(BaseHTTPRequestHandler):
    """Answers HEAD and GET on /{repo}/resolve/{revision}/{file} with the headers
    huggingface_hub 2.4.0 needs (file_download.get_hf_file_metadata: X-Repo-Commit, ETag,
    Content-Length) and its error codes (utils/_http.hf_raise_for_status: X-Error-Code,
    X-Error-Message). No X-Xet-* headers, so the plain HTTP path is taken."""

    served: ClassVar[list[tuple[str, str, str, int]]] = []  # (method, revision, file, bytes)
    tokens: ClassVar[list[str | None]] = []

    def do_HEAD(self):
        self._answer(with_body=False)

    def do_GET(self):
        self._answer(with_body=True)

    def _answer(self, with_body: bool) -> None:
        parts = unquote(urlsplit(self.path).path).lstrip("/").split("/", 4)
        token = self.headers.get("Authorization")
        self.tokens.append(token)
        if len(parts) != 5 or parts[2] != "resolve":
            return self._error(404, "RepoNotFound", "Repository not found", with_body)
        repo, revision, name = f"{parts[0]}/{parts[1]}", parts[3], parts[4]
        if repo in GATED:
            if token is None:
                msg = (
                    f"Access to model {repo} is restricted. You must have access to it and be "
                    "authenticated to access it. Please log in."
                )
                return self._error(401, "GatedRepo", msg, with_body)
            msg = (
                f"Access to model {repo} is restricted and you are not in the authorized list. "
                f"Visit https://huggingface.co/{repo} to ask for access."
            )
            return self._error(403, "GatedRepo", msg, with_body)
        if repo not in REPOS:  # the real Hub answers 401 to anonymous requests for these
            code = 401 if token is None else 404
            return self._error(code, "RepoNotFound", "Repository not found", with_body)
        files = REPOS[repo].get(revision)
        if files is None:
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}", with_body)
        commit = commit_of(repo, revision)
        body = files.get(name)
        if body is None:
            return self._error(404, "EntryNotFound", "Entry not found", with_body, commit)
        chunk, status = body, 200
        rng = self.headers.get("Range")
        if rng and with_body:
            start, end = (int(x) for x in rng.removeprefix("bytes=").split("-"))
            end = min(end, len(body) - 1)
            chunk, status = body[start : end + 1], 206
        self.send_response(status)
        self.send_header("X-Repo-Commit", commit)
        self.send_header("ETag", f'"{hashlib.sha1(body).hexdigest()}"')
        self.send_header("Content-Length", str(len(chunk)))
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{len(body)}")
        self.end_headers()
        if with_body:
            self.wfile.write(chunk)
        self.served.append((self.command, revision, name, len(chunk) if with_body else 0))

    def _error(self, code, error_code, message, with_body, commit=None):
        body = as_json({"error": message}) if with_body else b""
        self.send_response(code)
        self.send_header("X-Error-Code", error_code)
        self.send_header("X-Error-Message", message)
        if commit:
            self.send_header("X-Repo-Commit", commit)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def hub(monkeypatch, tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    # trainmem.sources.hf reads HF_ENDPOINT, HF_HUB_OFFLINE and the cache at call time.
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_port}")
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    monkeypatch.setenv("TRAINMEM_CACHE_DIR", str(tmp_path / "cache"))
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    from huggingface_hub import constants

    # huggingface_hub/constants.py (2.4.0) reads these at import, which may predate this test.
    # Telemetry off also skips build_hf_headers' fetch of an agent registry from the endpoint.
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", True)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no-login" / "token"))
    # get_safetensors_metadata stores a sharded index in the default cache (no cache_dir).
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf-hub"))
    Hub.served, Hub.tokens = [], []
    yield Hub
    server.shutdown()
    server.server_close()


def test_download_fetches_config_and_headers_only(hub, capsys):
    assert main(["plan", "--model", "acme/tiny", "--device", "1GB", "--json"]) == 2
    assert "--download" in capsys.readouterr().err
    assert main(["plan", "--model", "acme/tiny", "--device", "1GB", "--json", "--download"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["model"]["params"] == PARAMS and out["model"]["source"] == "downloaded"
    assert any("exact count" in n for n in out["notes"])
    for name in ("model-1.safetensors", "model-2.safetensors"):
        fetched = sum(n for _, _, file, n in hub.served if file == name)
        assert 0 < fetched <= 100_001 < WEIGHT_BYTES  # the header's range, never the weights
    folder = downloaded_model_dir("acme/tiny")
    assert sorted(p.name for p in folder.iterdir()) == [
        "config.json",
        "model-1.safetensors",
        "model-2.safetensors",
    ]
    assert max(p.stat().st_size for p in folder.iterdir()) < 1000  # header-only stubs
    # offline afterwards: the stub is found without the flag or the Hub
    hub.served.clear()
    assert main(["plan", "--model", "acme/tiny", "--device", "1GB", "--json"]) == 0
    assert hub.served == []


def test_revision_in_the_model_text_and_as_argument(hub, capsys):
    args = ["plan", "--model", "acme/tiny@abc123", "--device", "1GB", "--json", "--download"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["model"]["params"] == PARAMS_4 and out["model"]["source"] == "downloaded"
    assert {rev for _, rev, _, _ in hub.served} == {"abc123"}
    assert download("acme/tiny", revision="abc123") == downloaded_model_dir("acme/tiny", "abc123")
    assert resolve_model("acme/tiny@abc123").layers == 4
    with pytest.raises(PlanError):  # main was never fetched
        resolve_model("acme/tiny")


def test_a_repo_without_safetensors_keeps_its_config(hub):
    folder = download("acme/bare")
    assert [p.name for p in folder.iterdir()] == ["config.json"]
    assert resolve_model("acme/bare").source == "downloaded"


@pytest.mark.parametrize(
    ("model", "words"),
    [
        ("acme/missing", ["no such model", "hf auth login", "HTTP 401"]),
        ("acme/tiny@nope", ["no revision 'nope'", "HTTP 404"]),
    ],
)
def test_download_errors_are_one_line(hub, capsys, model, words):
    code = main(["plan", "--model", model, "--device", "1GB", "--download"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert all(w in err for w in words), err


def test_gated_without_and_with_a_token(hub, monkeypatch):
    with pytest.raises(DownloadError) as anonymous:
        download("acme/gated")
    assert "no token was sent" in str(anonymous.value) and "HTTP 401" in str(anonymous.value)
    assert hub.tokens[-1] is None
    monkeypatch.setenv("HF_TOKEN", "hf_test")  # read by huggingface_hub, not by trainmem
    with pytest.raises(DownloadError) as logged_in:
        download("acme/gated")
    message = str(logged_in.value)
    assert "your token has no access" in message and "licence" in message
    assert "HTTP 403" in message and "\n" not in message
    assert hub.tokens[-1] == "Bearer hf_test"


@pytest.mark.parametrize("how", ["env", "constant"])
def test_offline_mode_refuses_download_in_one_line(hub, monkeypatch, how):
    if how == "env":
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    else:  # what a process started with HF_HUB_OFFLINE=1 holds
        from huggingface_hub import constants

        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(DownloadError, match="HF_HUB_OFFLINE") as err:
        download("acme/tiny")
    assert "\n" not in str(err.value) and hub.served == []


def test_two_different_revisions_are_refused(hub):
    with pytest.raises(DownloadError, match="two revisions"):
        download("acme/tiny@abc123", revision="main")


def test_plan_json_path_imports_no_huggingface_hub():
    code = (
        "import sys, json, contextlib, io\n"
        "from trainmem.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(['plan', '--model', '1B', '--device', '24GB', '--json'])\n"
        "    main(['plan', '--model', 'Qwen/Qwen2.5-7B', '--device', '24GB', '--json'])\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert "trainmem.planner.report" in loaded  # the plan really ran
    assert not [m for m in loaded if m.split(".")[0] == "huggingface_hub"]


@pytest.fixture(params=["refused", "silent"])
def dead_endpoint(hub, monkeypatch, request):
    """HF_ENDPOINT where nothing answers: a port just freed (connection refused, what
    huggingface_hub 2.4.0 retries five times with 1+2+4+8+8 s of backoff) or a listener that
    closes each connection unanswered (a dead proxy), counting them. huggingface_hub's sleeps
    are recorded instead of slept, so a regression fails fast instead of waiting 23 s."""
    import socket

    from huggingface_hub.utils import _http

    sleeps: list[float] = []
    monkeypatch.setattr(_http.time, "sleep", sleeps.append)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{listener.getsockname()[1]}")
    attempts: list[int] = []
    if request.param == "refused":
        listener.close()
    else:
        listener.listen()

        def accept() -> None:
            while True:
                try:
                    conn, _ = listener.accept()
                except OSError:
                    return
                attempts.append(1)
                conn.close()

        threading.Thread(target=accept, daemon=True).start()
    yield request.param, attempts, sleeps
    listener.close()


def test_download_without_an_answer_fails_at_once_in_one_line(dead_endpoint, capsys, caplog):
    kind, attempts, sleeps = dead_endpoint
    code = main(["plan", "--model", "acme/tiny", "--device", "1GB", "--download"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "cannot reach the Hub" in err and "acme/tiny" in err
    assert sleeps == []  # one try: no backoff between retries
    assert not [r for r in caplog.records if r.name.startswith("huggingface_hub")]
    if kind == "silent":
        assert len(attempts) == 1


def test_offline_mode_on_the_command_line_sends_nothing(hub, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code = main(["plan", "--model", "acme/tiny", "--device", "1GB", "--download"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "HF_HUB_OFFLINE" in err, err
    assert hub.served == [] and hub.tokens == []  # not even a HEAD reached the stand-in
