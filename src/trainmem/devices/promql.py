"""The Prometheus side that needs no network: the server URL and label filter checks, the
queries a read sends, the Authorization header from the environment, and how device ids name
their node. Light to import (the dashboard's flags use it before the UI starts)."""

from __future__ import annotations

import base64
import re
import urllib.parse
from collections.abc import Mapping

TOKEN_ENV = "TRAINMEM_PROMETHEUS_TOKEN"
USER_ENV = "TRAINMEM_PROMETHEUS_USER"
PASSWORD_ENV = "TRAINMEM_PROMETHEUS_PASSWORD"

DCGM_USED = "DCGM_FI_DEV_FB_USED"
DCGM_FREE = "DCGM_FI_DEV_FB_FREE"
DCGM_RESERVED = "DCGM_FI_DEV_FB_RESERVED"
MEM_TOTAL = "node_memory_MemTotal_bytes"
MEM_AVAILABLE = "node_memory_MemAvailable_bytes"

_MATCHER = r'\s*[A-Za-z_][A-Za-z0-9_]*\s*(?:=~|!~|!=|=)\s*"(?:[^"\\\n]|\\.)*"\s*'
_SELECT = re.compile(rf"(?:{_MATCHER})(?:,(?:{_MATCHER}))*,?\s*")


def check_url(text: str) -> str:
    """The server's base URL (``http(s)://host[:port][/prefix]``), or ValueError saying why."""
    url = urllib.parse.urlsplit(text.strip())
    if url.scheme not in ("http", "https") or not url.hostname:
        raise ValueError(f"{text!r} is not an http:// or https:// URL of a Prometheus server")
    if url.username is not None or url.password is not None:
        # A password in a URL ends up in `ps` output and shell history.
        raise ValueError(
            f"put credentials in {TOKEN_ENV} or {USER_ENV}/{PASSWORD_ENV}, not the URL"
        )
    if url.query or url.fragment:
        raise ValueError(f"{text!r}: give the server's base URL, without ?query or #fragment")
    return urllib.parse.urlunsplit((url.scheme, url.netloc, url.path.rstrip("/"), "", ""))


def check_select(text: str) -> str:
    """Label matchers to put into every selector (``job="dcgm",Hostname=~"node-[0-3]"``),
    or ValueError: only matchers are accepted, so the filter cannot change a query's shape."""
    text = text.strip().removeprefix("{").removesuffix("}").strip()
    if text and not _SELECT.fullmatch(text):
        raise ValueError(
            f'{text!r} is not a list of label matchers such as job="dcgm",Hostname=~"node-.*"'
        )
    return text.rstrip().rstrip(",").strip()


def queries(select: str = "") -> dict[str, str]:
    """The four queries one read sends, by what they are for."""
    sel = f",{select}" if select else ""
    one = f"{{{select}}}" if select else ""
    return {
        "gpu": f'{{__name__=~"{DCGM_USED}|{DCGM_FREE}|{DCGM_RESERVED}"{sel}}}',
        "gpu_time": f"timestamp({DCGM_USED}{one})",
        "ram": f'{{__name__=~"{MEM_TOTAL}|{MEM_AVAILABLE}"{sel}}}',
        "ram_time": f"timestamp({MEM_AVAILABLE}{one})",
    }


def auth_header(env: Mapping[str, str]) -> str | None:
    """The Authorization header from the environment: a bearer token, or basic auth."""
    token = env.get(TOKEN_ENV, "").strip()
    user = env.get(USER_ENV, "")
    if token and user:
        raise ValueError(f"set {TOKEN_ENV} or {USER_ENV}/{PASSWORD_ENV}, not both")
    if token:
        return f"Bearer {token}"
    if user:
        pair = f"{user}:{env.get(PASSWORD_ENV, '')}".encode()
        return "Basic " + base64.b64encode(pair).decode("ascii")
    return None


def node_of(device_id: str) -> str | None:
    """The node a device id names (``node-1/gpu0`` -> ``node-1``); None for this machine's."""
    node, sep, _ = device_id.partition("/")
    return node if sep else None


def host_of(instance: str) -> str:
    """``node-1:9100`` -> ``node-1``; ``[fe80::1]:9100`` -> ``fe80::1``."""
    host = urllib.parse.urlsplit(f"//{instance}").hostname if instance else None
    return host or instance
