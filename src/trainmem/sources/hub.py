"""``--download``: fetch a model's config.json and safetensors headers from the Hugging Face
Hub, only when the user asks. Weights are never downloaded: each shard's header is read with
two HTTP range requests (its 8-byte length, then the JSON), and stored as a header-only stub
that the offline resolver reads like a real checkpoint.

HF_ENDPOINT and HF_TOKEN are honoured as huggingface_hub does (mirrors, gated models).
"""

from __future__ import annotations

import json
import os
import struct
import urllib.error
import urllib.request
from pathlib import Path

from trainmem.sources.paths import downloaded_model_dir
from trainmem.sources.safetensors import MAX_HEADER

TIMEOUT_S = 20


class DownloadError(ValueError):
    """A one-line reason the download failed (network, 404, gated, malformed file)."""


def _url(hf_id: str, name: str) -> str:
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    return f"{endpoint}/{hf_id}/resolve/main/{name}"


def _get(hf_id: str, name: str, byte_range: tuple[int, int] | None = None) -> bytes:
    request = urllib.request.Request(_url(hf_id, name))
    if os.environ.get("HF_TOKEN"):
        request.add_header("Authorization", f"Bearer {os.environ['HF_TOKEN']}")
    if byte_range:
        request.add_header("Range", f"bytes={byte_range[0]}-{byte_range[1]}")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            data: bytes = response.read()
    except urllib.error.HTTPError as exc:
        hint = " (gated or private: set HF_TOKEN)" if exc.code in (401, 403) else ""
        raise DownloadError(f"{hf_id}/{name}: HTTP {exc.code}{hint}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise DownloadError(f"cannot reach the Hub for {hf_id}: {reason}") from None
    if byte_range and len(data) > byte_range[1] - byte_range[0] + 1:
        data = data[: byte_range[1] - byte_range[0] + 1]  # a server that ignored Range
    return data


def _header(hf_id: str, shard: str) -> bytes:
    (length,) = struct.unpack("<Q", _get(hf_id, shard, (0, 7)).ljust(8, b"\0"))
    if not 0 < length <= MAX_HEADER:
        raise DownloadError(f"{hf_id}/{shard}: not a safetensors file")
    return _get(hf_id, shard, (8, 7 + length))


def download(hf_id: str) -> Path:
    """Fetch config.json and every shard's header; return the folder the resolver reads."""
    config = _get(hf_id, "config.json")
    try:
        json.loads(config)
    except json.JSONDecodeError:
        raise DownloadError(f"{hf_id}/config.json is not JSON") from None
    try:
        index = json.loads(_get(hf_id, "model.safetensors.index.json"))
        shards = sorted(set(index["weight_map"].values()))
    except (DownloadError, json.JSONDecodeError, KeyError, TypeError):
        shards = ["model.safetensors"]
    headers = {}
    for shard in shards:
        try:
            headers[shard] = _header(hf_id, shard)
        except DownloadError:
            if shards != ["model.safetensors"]:
                raise
            headers = {}  # no safetensors at all: the config alone still gives the shapes
    folder = downloaded_model_dir(hf_id)
    folder.mkdir(parents=True, exist_ok=True)
    for shard, header in headers.items():
        (folder / Path(shard).name).write_bytes(struct.pack("<Q", len(header)) + header)
    tmp = folder / "config.json.tmp"
    tmp.write_bytes(config)
    tmp.replace(folder / "config.json")  # written last: its presence means complete
    return folder
