"""Rows of `status`: the context of the newest model call against its lines, the window in
force, and what the server's prompt cache did over the run."""

from __future__ import annotations

from typing import Any

from rich.text import Text

from ouroboros.ground.printable import printable
from ouroboros.observe.describe import ZONE_STYLE, bar, figure, line_marks


def context_text(usage: dict[str, Any] | None) -> Text:
    if usage is None:
        return Text("no model call yet", style="dim")
    zone = str(usage.get("zone", "normal"))
    fraction = float(usage.get("fraction", 0.0))
    text = Text(
        f"{bar(fraction, lines=line_marks(usage))} {fraction:.0%} {zone}",
        style=ZONE_STYLE.get(zone, "white"),
    )
    text.append(
        f"  {figure(usage.get('total_tokens'))} of {figure(usage.get('prompt_budget'))} tokens "
        f"(session {usage.get('session')}, turn {usage.get('turn')}, {usage.get('source')})"
    )
    return text


def window_text(window: dict[str, Any] | None) -> Text:
    """The window in force: the start's, or a smaller one a refusal stated since."""
    if window is None:
        return Text("not known yet", style="dim")
    said = f"{figure(window.get('context_limit'))} tokens ({window.get('server')}: "
    return Text(printable(f"{said}{window.get('detail')})"))


def cache_text(prefill: dict[str, Any]) -> Text:
    cached, processed = prefill.get("cached_tokens", 0), prefill.get("processed_tokens", 0)
    if not cached + processed:
        return Text("not reported by the server", style="dim")
    text = f"{cached / (cached + processed):.0%} of prompt tokens cached over "
    text += f"{prefill.get('calls', 0):,} calls"
    if prefill.get("timed_calls"):
        text += f", prefill {prefill['prefill_ms'] / prefill['timed_calls'] / 1000:.1f} s per call"
    return Text(text)
