"""Text from another process is untrusted: make it inert before a terminal shows it. (The
channel keeps it as written: JSON output escapes it, and every place that draws or prints it for a
person passes it through safe_text.)"""

from __future__ import annotations

# C0 and C1 controls and DEL (terminal escape sequences), and the bidirectional overrides that
# can make text display as something it is not.
_UNSAFE = [*range(0x00, 0x20), *range(0x7F, 0xA0), *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
_ESCAPES = {c: f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}" for c in _UNSAFE}


def count(n: int, word: str) -> str:
    """'1 step', '10 steps': a number and its word, plural unless it is 1."""
    return f"{n} {word}{'' if n == 1 else 's'}"


def safe_text(s: str, limit: int = 4096) -> str:
    """s with control characters shown as visible escapes (ESC becomes the four characters
    '\\x1b'), cut to limit characters. Markup such as '[bold]' is left as literal characters:
    whoever renders it must not interpret it."""
    if len(s) > limit:
        s = s[:limit] + "…"
    return s.translate(_ESCAPES)

