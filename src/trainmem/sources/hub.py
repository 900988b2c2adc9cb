"""``--download``: fetch a model's config.json and safetensors headers from the Hugging Face
Hub, only when the user asks, through huggingface_hub (2.4.0). Weights are never downloaded:
get_safetensors_metadata reads each shard's header with range requests, and the headers are
stored as header-only stubs that the offline resolver reads like a real checkpoint.

huggingface_hub supplies the token (HF_TOKEN or `hf auth login`) and HF_ENDPOINT; every
failure it raises becomes one ``DownloadError`` line saying what to do.

Without a network, hf_hub_download would retry its HEAD five times with backoff (1+2+4+8+8 s,
file_download.py and utils/_http.py::_http_backoff_base in 2.4.0), logging two lines a try. So
one HEAD of config.json goes first, without retries (get_hf_file_metadata's default): no
answer there fails at once, in one line; an answer means the Hub is reachable, and the real
fetch keeps huggingface_hub's retries for a connection that drops later.
"""

from __future__ import annotations

import json
import shutil
import struct
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote

from trainmem.sources import hf
from trainmem.sources.hf import split_revision as split_revision  # for the CLI: "org/m@rev"
from trainmem.sources.paths import downloaded_model_dir

if TYPE_CHECKING:
    from huggingface_hub.errors import HfHubHTTPError
    from huggingface_hub.utils._safetensors import SafetensorsFileMetadata  # its defining module


class DownloadError(ValueError):
    """A one-line reason the download failed (network, not found, gated, malformed file)."""


def download(hf_id: str, revision: str | None = None) -> Path:
    """Fetch config.json and every shard's header; return the folder the resolver reads.

    ``hf_id`` may carry the revision itself (``org/model@rev``)."""
    name, in_text = split_revision(hf_id)
    if revision and in_text and revision != in_text:
        raise DownloadError(f"{hf_id}: two revisions given ({in_text!r} and {revision!r})")
    revision = revision or in_text
    if hf.offline():
        raise DownloadError(_offline(name, revision))
    folder = downloaded_model_dir(name, revision)
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".download-", dir=folder.parent))
    try:
        _reachable(name, revision)
        config, headers = _fetch(name, revision, staging)
    except DownloadError:
        raise
    except Exception as exc:  # whatever huggingface_hub raises: one line, never a traceback
        raise DownloadError(_reason(exc, name, revision)) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    _store(folder, config, headers)
    return folder


PROBE_TIMEOUT = 5.0  # seconds for the first HEAD; a reachable Hub answers in well under one


def _reachable(hf_id: str, revision: str | None) -> None:
    """One HEAD of config.json, no retries: raises what huggingface_hub raises (an httpx2
    transport error when nothing answers, an HfHubHTTPError for 401/403/404...)."""
    from huggingface_hub import constants, get_hf_file_metadata, hf_hub_url

    # HF_HUB_ETAG_TIMEOUT, when the user sets it, wins (as in file_download.py, 2.4.0).
    timeout: float = constants.HF_HUB_ETAG_TIMEOUT
    if timeout == constants.DEFAULT_ETAG_TIMEOUT:
        timeout = PROBE_TIMEOUT
    url = hf_hub_url(hf_id, "config.json", revision=revision, endpoint=hf.endpoint())
    get_hf_file_metadata(url, timeout=timeout, endpoint=hf.endpoint())


def _fetch(hf_id: str, revision: str | None, staging: Path) -> tuple[bytes, dict[str, bytes]]:
    from huggingface_hub import HfApi, constants, hf_hub_download
    from huggingface_hub.errors import NotASafetensorsRepoError
    from huggingface_hub.utils.tqdm import disable_progress_bars

    with ExitStack() as stack:
        if constants.HF_HUB_DISABLE_PROGRESS_BARS is None:  # an explicit user setting wins
            stack.enter_context(disable_progress_bars())  # no tqdm noise on the CLI or TUI
        # local_dir: config.json lands in a scratch folder, not in the user's hub cache
        # (a config-only snapshot there would shadow these headers on the next resolve).
        path = hf_hub_download(
            hf_id,
            "config.json",
            revision=revision,
            cache_dir=hf.hub_cache_dir(),
            local_dir=staging,
            endpoint=hf.endpoint(),
        )
        config = Path(path).read_bytes()
        try:
            json.loads(config)
        except (ValueError, RecursionError):  # not JSON (UTF-8 errors too), or nested too deep
            raise DownloadError(f"{hf_id}/config.json is not JSON") from None
        try:
            repo = HfApi(endpoint=hf.endpoint()).get_safetensors_metadata(hf_id, revision=revision)
        except NotASafetensorsRepoError:
            return config, {}  # no safetensors at all: the config alone still gives the shapes
    return config, {shard: _header(meta) for shard, meta in repo.files_metadata.items()}


def _header(meta: SafetensorsFileMetadata) -> bytes:
    header: dict[str, object] = {
        name: {"dtype": t.dtype, "shape": list(t.shape), "data_offsets": list(t.data_offsets)}
        for name, t in meta.tensors.items()
    }
    if meta.metadata:
        header["__metadata__"] = meta.metadata
    return json.dumps(header).encode()


def _store(folder: Path, config: bytes, headers: dict[str, bytes]) -> None:
    """Header stubs (8-byte length + JSON, see sources/safetensors.py), then config.json."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").unlink(missing_ok=True)  # incomplete until written again, last
    for stale in folder.glob("*.safetensors"):
        stale.unlink()
    for shard, header in headers.items():
        (folder / Path(shard).name).write_bytes(struct.pack("<Q", len(header)) + header)
    tmp = folder / "config.json.tmp"
    tmp.write_bytes(config)
    tmp.replace(folder / "config.json")  # its presence means complete


def _offline(hf_id: str, revision: str | None) -> str:
    at = _at(hf_id, revision)
    return f"cannot download {at}: HF_HUB_OFFLINE is set (unset it or drop --download)"


def _at(hf_id: str, revision: str | None) -> str:
    return f"{hf_id}@{revision}" if revision else hf_id


def _reason(exc: BaseException, hf_id: str, revision: str | None) -> str:
    """One line for a huggingface_hub failure (classes from huggingface_hub/errors.py, 2.4.0)."""
    import httpx2
    from huggingface_hub import errors

    at = _at(hf_id, revision)
    if isinstance(exc, httpx2.TransportError):  # the probe, unretried: no DNS, refused, timeout
        return _unreachable(at, exc)
    if isinstance(exc, errors.OfflineModeIsEnabled):
        return _offline(hf_id, revision)
    if isinstance(exc, errors.LocalEntryNotFoundError) and isinstance(
        exc.__cause__, errors.HfHubHTTPError
    ):
        exc = exc.__cause__  # hf_hub_download reports e.g. a plain 403 as "not in the cache"
    if isinstance(exc, errors.HfHubHTTPError):
        return _http_reason(exc, hf_id, revision)
    if isinstance(exc, errors.LocalEntryNotFoundError):  # connection refused, timeout, proxy...
        return _unreachable(at, exc.__cause__ or exc)
    if isinstance(exc, errors.SafetensorsParsingError):
        return f"{at}: unreadable safetensors header: {_line(exc)}"
    return f"{at}: {type(exc).__name__}: {_line(exc)}"


def _unreachable(at: str, exc: BaseException) -> str:
    where = hf.endpoint() or "https://huggingface.co"
    return (
        f"cannot reach the Hub at {where} for {at}: {_line(exc)} "
        "(no network? drop --download, or set HF_ENDPOINT to a mirror)"
    )


def _http_reason(exc: HfHubHTTPError, hf_id: str, revision: str | None) -> str:
    from huggingface_hub import errors

    at, code = _at(hf_id, revision), exc.response.status_code
    login = "log in with `hf auth login` or set HF_TOKEN"
    token = _token_sent(exc)
    if isinstance(exc, errors.GatedRepoError):
        page = f"{hf.endpoint() or 'https://huggingface.co'}/{hf_id}"
        if token:
            return (
                f"{at} is gated and your token has no access: "
                f"accept its licence at {page} (HTTP {code})"
            )
        return (
            f"{at} is gated and no token was sent: {login}, "
            f"after accepting its licence at {page} (HTTP {code})"
        )
    if isinstance(exc, errors.RevisionNotFoundError):
        return f"{hf_id} has no revision {revision or 'main'!r} (HTTP {code})"
    if isinstance(exc, errors.RepositoryNotFoundError):
        if token:
            return (
                f"{at}: no such model on the Hub, or your token has no access to it (HTTP {code})"
            )
        return f"{at}: no such model on the Hub; if it is private, {login} (HTTP {code})"
    if isinstance(exc, errors.RemoteEntryNotFoundError):
        name = unquote(str(exc.response.url).rsplit("/", 1)[-1])
        return f"{at} has no {name} (HTTP {code})"
    if isinstance(exc, errors.DisabledRepoError):
        return f"{at} is disabled on the Hub (HTTP {code})"
    if code in (401, 403):
        hint = (
            "your token was refused or lacks permission" if token else f"no token was sent: {login}"
        )
        return f"{at}: access denied, {hint} (HTTP {code})"
    detail = _line(exc.server_message) if exc.server_message else ""
    return f"{at}: the Hub answered HTTP {code}" + (f": {detail}" if detail else "")


def _token_sent(exc: HfHubHTTPError) -> bool:
    """Whether the failed request carried a token. Read from ``exc.response.request``: in
    2.4.0 ``exc.request`` is unset, since errors.py assigns it before httpx2.HTTPError's
    ``__init__`` resets it to None."""
    try:
        return "authorization" in exc.response.request.headers
    except (AttributeError, RuntimeError):  # httpx2 raises RuntimeError for a detached response
        return False


def _line(exc: object) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__
