"""The Prometheus side that needs no network: the server URL and label filter checks, the
queries a read sends, the Authorization header from the environment, and how device ids name
their node. Light to import (the dashboard's flags use it before the UI starts)."""

from __future__ import annotations

import base64
import ipaddress
import re
import urllib.parse
from collections.abc import Mapping

from trainmem.core.units import shown

TOKEN_ENV = "TRAINMEM_PROMETHEUS_TOKEN"
USER_ENV = "TRAINMEM_PROMETHEUS_USER"
PASSWORD_ENV = "TRAINMEM_PROMETHEUS_PASSWORD"

DCGM_USED = "DCGM_FI_DEV_FB_USED"
DCGM_FREE = "DCGM_FI_DEV_FB_FREE"
DCGM_RESERVED = "DCGM_FI_DEV_FB_RESERVED"
MEM_TOTAL = "node_memory_MemTotal_bytes"
MEM_AVAILABLE = "node_memory_MemAvailable_bytes"
# What `devices --serve` exports (trainmem.devices.exporter), read back as a third source.
OWN_PREFIX = "trainmem_device_"
OWN_BYTES = ("total_bytes", "used_bytes", "free_bytes", "usable_bytes")
OWN_UP = "trainmem_device_up"
OWN_STALE = "trainmem_device_stale_seconds"
OWN_METRICS = (*(OWN_PREFIX + f for f in OWN_BYTES), OWN_UP, OWN_STALE)

MAX_URL = 2048  # characters; a base URL is far shorter
# A DNS name (RFC 1123 labels; "_" too, as some internal names use it), checked after IDNA.
_LABEL = re.compile(r"(?!-)[A-Za-z0-9_-]{1,63}(?<!-)")

MAX_SELECT = 4096  # characters of a label filter; a long one is a few hundred
_MATCHER = r'\s*[A-Za-z_][A-Za-z0-9_]*\s*(?:=~|!~|!=|=)\s*"(?:[^"\\\n]|\\.)*"\s*'
# No two \s* meet (a matcher ends with one; the trailing comma brings its own): where they
# did, a filter of many spaces took quadratic time to refuse.
_SELECT = re.compile(rf"(?:{_MATCHER})(?:,(?:{_MATCHER}))*(?:,\s*)?")


def check_url(text: str) -> str:
    """The server's base URL (``http(s)://host[:port][/prefix]``), or ValueError saying why:
    the host must be a DNS name or an IP address and the port a number in 1..65535, so that
    nothing malformed reaches http.client."""
    if len(text) > MAX_URL:
        raise ValueError(f"the URL is {len(text):,} characters long; give the server's base URL")
    if not text.isprintable():
        raise ValueError(f"{shown(text, 80)} has control characters; give the server's base URL")
    try:
        url = urllib.parse.urlsplit(text.strip())
    except ValueError as err:  # "Invalid IPv6 URL"
        raise ValueError(f"{shown(text, 80)} is not a valid URL: {err}") from None
    if url.scheme not in ("http", "https") or not url.hostname:
        raise ValueError(
            f"{shown(text, 80)} is not an http:// or https:// URL of a Prometheus server"
        )
    try:
        port = url.port
    except ValueError:  # "Port out of range 0-65535", "could not be cast to integer"
        port = 0
    if port == 0 or url.netloc.endswith(":"):
        raise ValueError(f"{shown(text, 80)}: the port must be a number in 1..65535")
    host = check_host(url.hostname)
    if url.username is not None or url.password is not None:
        # A password in a URL ends up in `ps` output and shell history.
        raise ValueError(
            f"put credentials in {TOKEN_ENV} or {USER_ENV}/{PASSWORD_ENV}, not the URL"
        )
    if url.query or url.fragment:
        raise ValueError(
            f"{shown(text, 80)}: give the server's base URL, without ?query or #fragment"
        )
    path = url.path.rstrip("/")
    if not path.isascii() or " " in path:  # http.client sends no such request line
        quoted = urllib.parse.quote(path, safe="/%")
        raise ValueError(f"{shown(text, 80)}: write the path percent-encoded ({quoted})")
    netloc = f"[{host}]" if ":" in host else host  # the name as IDNA writes it in ASCII
    if url.port is not None:
        netloc += f":{url.port}"
    return urllib.parse.urlunsplit((url.scheme, netloc, path, "", ""))


def check_host(host: str) -> str:
    """``host`` as sent: an IP address, or a DNS name in the ASCII form IDNA gives it
    (``ｌｏｃａｌｈｏｓｔ`` is ``localhost``); ValueError for anything else."""
    try:
        ipaddress.ip_address(host)
        return host
    except ValueError:
        pass
    try:
        ascii_name = host.encode("idna").decode("ascii")
    except UnicodeError:  # "a..b", a label over 63 characters, ...
        raise ValueError(f"{shown(host, 80)} is not a valid host name") from None
    labels = ascii_name.removesuffix(".").split(".")
    if len(ascii_name) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        raise ValueError(f"{shown(host, 80)} is not a valid host name")
    return ascii_name


def check_select(text: str) -> str:
    """Label matchers to put into every selector (``job="dcgm",Hostname=~"node-[0-3]"``),
    or ValueError: only matchers are accepted, so the filter cannot change a query's shape."""
    if len(text) > MAX_SELECT:
        raise ValueError(
            f"the label filter is {len(text):,} characters long; at most {MAX_SELECT:,}"
        )
    text = text.strip().removeprefix("{").removesuffix("}").strip()
    if text and not _SELECT.fullmatch(text):
        raise ValueError(
            f"{shown(text, 120)} is not a list of label matchers such as "
            'job="dcgm",Hostname=~"node-.*"'
        )
    return text.rstrip().rstrip(",").strip()


def queries(select: str = "") -> dict[str, str]:
    """The six queries one read sends, by what they are for: dcgm-exporter's GPUs,
    node_exporter's RAM and trainmem's own devices, each with the time of its newest sample."""
    sel = f",{select}" if select else ""
    one = f"{{{select}}}" if select else ""
    return {
        "gpu": f'{{__name__=~"{DCGM_USED}|{DCGM_FREE}|{DCGM_RESERVED}"{sel}}}',
        "gpu_time": f"timestamp({DCGM_USED}{one})",
        "ram": f'{{__name__=~"{MEM_TOTAL}|{MEM_AVAILABLE}"{sel}}}',
        "ram_time": f"timestamp({MEM_AVAILABLE}{one})",
        "own": f'{{__name__=~"{"|".join(OWN_METRICS)}"{sel}}}',
        "own_time": f"timestamp({OWN_UP}{one})",
    }


def auth_header(env: Mapping[str, str]) -> str | None:
    """The Authorization header from the environment: a bearer token, or basic auth."""
    token = env.get(TOKEN_ENV, "").strip()
    user = env.get(USER_ENV, "")
    if token and user:
        raise ValueError(f"set {TOKEN_ENV} or {USER_ENV}/{PASSWORD_ENV}, not both")
    if token:
        if not (token.isascii() and token.isprintable()):  # never the value: it is a secret
            raise ValueError(
                f"{TOKEN_ENV} holds a control or non-ASCII character (a token read from a "
                "file with its line break?); no token can"
            )
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
    """``node-1:9100`` -> ``node-1``; ``[fe80::1]:9100`` -> ``fe80::1``; a label that is no
    host:port (``[`` alone, a bad port) is returned as it is."""
    try:
        host = urllib.parse.urlsplit(f"//{instance}").hostname if instance else None
    except ValueError:  # "Invalid IPv6 URL": an unclosed "["
        return instance
    return host or instance
