"""What a run made the server process: its prompts less what a prompt cache kept.

Shared by the benches (replay.py, context_policies.py). A server with a prompt cache (llama-server,
Ollama, vLLM with prefix caching) keeps the previous request's tokens and processes only what
follows the prefix the new request shares with it. Here that prefix is counted whole messages at
a time (the tools and every leading message equal to the previous request's), which leaves out
the few tokens a changed message may share at its start; on llama-server with `--swa-full` the
two agree within those tokens (servers.md, "Seen on our own machines").

A *break* is a request that does not only append to the one before in the same session: the
server processes again everything after the first change. A session's first request is a
restart, not a break (its opening message differs; the system prompt and tools stay cached).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ouroboros.model.cache_check import common_prefix

Count = Callable[[dict[str, Any]], int]
"""Prompt tokens of a request body (its tools and messages)."""


@dataclass
class Prefill:
    processed: int = 0
    prompt: int = 0
    sessions: int = 0
    breaks: int = 0
    at_restarts: int = 0
    """Processed by sessions' first requests."""
    after_breaks: list[int] = field(default_factory=list)
    """Processed by each break: what the server did again."""

    def per_session(self) -> float:
        return self.breaks / max(self.sessions, 1)


def shared_messages(before: dict[str, Any], now: dict[str, Any]) -> int:
    if before.get("tools") != now.get("tools"):
        return 0
    return common_prefix(before["messages"], now["messages"])


def prefill(requests: Sequence[dict[str, Any]], count: Count) -> Prefill:
    p = Prefill()
    before: dict[str, Any] | None = None
    for body in requests:
        prompt = count(body)
        same = shared_messages(before, body) if before is not None else 0
        cached = count({**body, "messages": body["messages"][:same]}) if same else 0
        processed = prompt - cached
        p.prompt += prompt
        p.processed += processed
        restart = before is None or before["messages"][1:2] != body["messages"][1:2]
        if restart:
            p.sessions += 1
            p.at_restarts += processed
        elif before is not None and same < len(before["messages"]):
            p.breaks += 1
            p.after_breaks.append(processed)
        before = body
    return p
