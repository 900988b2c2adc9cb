"""--download against a Hub stand-in on loopback: config and headers only, never weights."""

import json
import struct
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from trainmem.cli.main import main

CONFIG = {
    "model_type": "llama",
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "vocab_size": 100,
    "tie_word_embeddings": True,
}


def shard(tensors: dict[str, list[int]], data_bytes: int) -> bytes:
    header = json.dumps(
        {n: {"dtype": "BF16", "shape": s, "data_offsets": [0, 0]} for n, s in tensors.items()}
    ).encode()
    return struct.pack("<Q", len(header)) + header + b"\xff" * data_bytes


FILES = {
    "/acme/tiny/resolve/main/config.json": json.dumps(CONFIG).encode(),
    "/acme/tiny/resolve/main/model.safetensors.index.json": json.dumps(
        {"weight_map": {"a": "model-1.safetensors", "b": "model-2.safetensors"}}
    ).encode(),
    "/acme/tiny/resolve/main/model-1.safetensors": shard({"a": [10, 10]}, 200),
    "/acme/tiny/resolve/main/model-2.safetensors": shard({"b": [7]}, 14),
}


class Hub(BaseHTTPRequestHandler):
    served: ClassVar[list[tuple[str, int]]] = []

    def do_GET(self):
        body = FILES.get(self.path)
        if body is None:
            self.send_error(404)
            return
        if rng := self.headers.get("Range"):
            start, end = (int(x) for x in rng.removeprefix("bytes=").split("-"))
            body = body[start : end + 1]
        self.served.append((self.path, len(body)))
        self.send_response(206 if rng else 200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def hub(monkeypatch, tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_port}")
    monkeypatch.setenv("TRAINMEM_CACHE_DIR", str(tmp_path / "cache"))
    Hub.served = []
    yield Hub
    server.shutdown()


def test_download_fetches_config_and_headers_only(hub, capsys):
    assert main(["plan", "--model", "acme/tiny", "--device", "1GB", "--json"]) == 2
    assert "--download" in capsys.readouterr().err
    assert main(["plan", "--model", "acme/tiny", "--device", "1GB", "--json", "--download"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["model"]["params"] == 107 and out["model"]["source"] == "downloaded"
    weights_bytes = [n for path, n in hub.served if path.endswith("safetensors") and n >= 200]
    assert weights_bytes == []  # only the 8-byte lengths and the JSON headers
    # offline afterwards: the stub is found without the flag
    hub.served.clear()
    assert main(["plan", "--model", "acme/tiny", "--device", "1GB", "--json"]) == 0
    assert hub.served == []


def test_download_errors_are_one_line(hub, capsys):
    code = main(["plan", "--model", "acme/missing", "--device", "1GB", "--download"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "HTTP 404" in err and len(err.splitlines()) == 1
