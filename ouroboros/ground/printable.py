"""Text from the agent, the model server or the logs, made safe to show on a terminal or a page.

A tool name, a path, a command, a summary or a server's error text may hold escape sequences
(OSC 52 writes the clipboard, OSC 8 makes links, CSI moves the cursor and clears the screen),
other control characters (a carriage return rewrites the line) or bidirectional overrides (text
that reads differently from what it is). Shown, each becomes a visible stand-in: ESC as `␛`, the
other C0 controls as their pictures (`␀`..`␟`), DEL as `␡`, C1 controls as `\\x9b`, and the
bidirectional controls as `<U+202E>`. `--json` output is left exact.
"""

from __future__ import annotations

_BIDI = [0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
"""The marks, embeddings, overrides and isolates that reorder what follows them."""
_SEPARATORS = [0x2028, 0x2029]
"""Line and paragraph separators: some terminals break the line at them."""

BEYOND_C0 = (0x7F, *range(0x80, 0xA0), *_BIDI, *_SEPARATORS)
"""What a terminal acts on, or reorders text by, that JSON leaves unescaped (it escapes C0)."""

_VISIBLE: dict[int, str] = {
    **{code: chr(0x2400 + code) for code in range(0x20)},
    0x7F: "␡",
    **{code: f"\\x{code:02x}" for code in range(0x80, 0xA0)},
    **{code: f"<U+{code:04X}>" for code in (*_BIDI, *_SEPARATORS)},
}
_ONE_LINE = {**_VISIBLE, ord("\n"): "⏎", ord("\t"): " "}
_LINES = {**_VISIBLE, ord("\n"): "\n", ord("\t"): "\t"}


def printable(text: str, lines: bool = False) -> str:
    """`text` with every control character and reordering mark made visible; a newline is
    kept only where `lines` asks for a display of several lines (else shown as `⏎`)."""
    return text.translate(_LINES if lines else _ONE_LINE)
