"""Text from outside (a run log's names, a file's labels, a server's error text) made safe to
show in a terminal: every character a terminal could act on is written out as an escape.

A terminal acts on C0 controls (ESC starts CSI and OSC sequences: colours, clearing the
screen, the window title, OSC 52 clipboard writes), DEL and C1 controls (U+0080..U+009F: 8-bit
CSI and OSC on terminals that take them); format characters (bidi overrides such as U+202E,
zero-width ones) reorder or hide what is shown, and line or paragraph separators break a line;
a lone surrogate (JSON's ``"\\udc80"``) cannot even be encoded. Everything else is kept as it
is. Rich markup is a separate matter: text shown through rich goes in ``rich.text.Text``
objects, which never parse markup.
"""

from __future__ import annotations

import unicodedata

# str.isprintable() is False for every category here (and for a few harmless ones, such as a
# no-break space): a quick test first, then character by character.
_SHOWN = frozenset(("Cc", "Cf", "Cs", "Zl", "Zp"))


def _escape(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def visible(text: str) -> str:
    """``text`` with control characters, escape sequences, format characters, line separators
    and lone surrogates shown as ``\\xNN`` / ``\\uNNNN`` escapes: ``"a\\x1b[2Jb"`` (ESC) is
    shown as the nine characters ``a\\x1b[2Jb``, and the screen is not cleared."""
    if text.isprintable():
        return text
    return "".join(_escape(c) if unicodedata.category(c) in _SHOWN else c for c in text)


def has_controls(text: str) -> bool:
    """Whether ``visible`` would change ``text`` (a name holding one is refused as a key)."""
    return visible(text) != text


def lone_surrogate(text: str) -> bool:
    """Whether ``text`` holds a lone surrogate: JSON's ``"\\udc80"``, or a byte that was not
    UTF-8 read with ``surrogateescape``; no UTF-8 (and no tokenizer) can take it."""
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False
