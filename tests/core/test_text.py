"""core.text.visible: what a terminal could act on is written out, everything else kept."""

from __future__ import annotations

import pytest

from trainmem.core.text import has_controls, visible


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"),
        ("Qwen/Qwen2.5-7B · été 東京", "Qwen/Qwen2.5-7B · été 東京"),  # printable: kept
        ("a\x1b[2Jb", "a\\x1b[2Jb"),  # CSI: clear the screen
        ("\x1b]52;c;aGVsbG8=\x07", "\\x1b]52;c;aGVsbG8=\\x07"),  # OSC 52: the clipboard
        ("\x1b]0;title\x1b\\", "\\x1b]0;title\\x1b\\"),  # OSC 0: the window title
        ("8-bit \x9b31m CSI", "8-bit \\x9b31m CSI"),  # C1 controls
        ("tab\tnew\nline\r\x00\x7f", "tab\\x09new\\x0aline\\x0d\\x00\\x7f"),
        ("left\u202eright", "left\\u202eright"),  # a bidi override reorders what is shown
        ("zero\u200bwidth", "zero\\u200bwidth"),
        ("line\u2028sep", "line\\u2028sep"),
        ("lone \udc80 surrogate", "lone \\udc80 surrogate"),  # cannot even be encoded
        ("tag \U000e0041", "tag \\U000e0041"),
        ("[bold]markup[/]", "[bold]markup[/]"),  # markup is rich's matter: pass Text objects
    ],
)
def test_visible(raw: str, shown: str) -> None:
    assert visible(raw) == shown
    assert visible(shown) == shown  # what it writes is itself safe to show
    assert has_controls(raw) == (raw != shown)
    visible(raw).encode("utf-8")  # never a lone surrogate left
