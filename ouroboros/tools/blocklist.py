"""Commands the agent may not run, whatever it was told: they can damage the machine itself."""

from __future__ import annotations

import re

_SYSTEM_DIRS = r"/(etc|bin|sbin|usr|lib|lib64|boot|sys|proc|var|opt|root)\b"
_RULES: list[tuple[str, re.Pattern[str]]] = [
    ("sudo", re.compile(r"(^|[\s;&|(`])(sudo|doas|su)\s")),
    (
        "rm -rf of / or home",
        re.compile(r"\brm\s+(-\S+\s+)*(/|/\*|~/?|\$HOME/?|\.\./?\.\.)(\s|$|;|&)"),
    ),
    ("mkfs", re.compile(r"\bmkfs(\.\w+)?\b")),
    ("dd to a device", re.compile(r"\bdd\b[^;&|]*\bof=/dev/")),
    ("write to a device", re.compile(r">\s*/dev/(sd|nvme|hd|vd|xvd|mmcblk|disk)")),
    (
        "shutdown or reboot",
        re.compile(r"(^|[\s;&|(])(shutdown|reboot|halt|poweroff|init\s+[06])\b"),
    ),
    ("fork bomb", re.compile(r":\s*\(\s*\)\s*\{[^}]*:\s*\|\s*:")),
    ("write to a system folder", re.compile(r"(>>?|\btee\s+(-a\s+)?)\s*" + _SYSTEM_DIRS)),
    (
        "change a system folder",
        re.compile(r"\b(rm|mv|cp|chmod|chown|ln|truncate)\b[^;&|]*\s" + _SYSTEM_DIRS),
    ),
]


def blocked_reason(command: str) -> str | None:
    """The name of the rule the command breaks, or None if it may run."""
    for name, pattern in _RULES:
        if pattern.search(command):
            return name
    return None
