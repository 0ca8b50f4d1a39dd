"""Token counts for `replay.py`: llama-server's template and tokenizer (Gemma 3 270M) when it
is installed, else bytes/4 and 4 per message."""

from __future__ import annotations

import json
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parents[1]


def flat(wire: dict[str, Any]) -> dict[str, str]:
    """A message as a template renders it, its tool calls written out as JSON."""
    calls = "".join(
        f'\n<tool_call>{{"name": "{c["function"]["name"]}", "arguments": '
        f"{c['function']['arguments']}}}</tool_call>"
        for c in wire.get("tool_calls") or []
    )
    return {"role": wire["role"], "content": (wire.get("content") or "") + calls}


class ByteTokens:
    """bytes/4 and 4 per message: the stand-in for a real tokenizer."""

    frame = 0
    """Tokens of a prompt without messages (BOS, the generation prompt)."""

    def __init__(self, source: str = "bytes/4"):
        self.source = source

    def text(self, text: str) -> int:
        return len(text.encode()) // 4

    def message(self, wire: dict[str, Any]) -> int:
        return self.text(flat(wire)["content"]) + 4

    def endpoint(self, path: str, body: dict[str, Any]) -> Any:
        """llama-server's own template and tokenizer endpoints: none without a real tokenizer."""
        return None

    def prompt(self, body: dict[str, Any]) -> int:
        tools = self.text(json.dumps(body["tools"])) if body.get("tools") else 0
        return self.frame + tools + sum(self.message(m) for m in body.get("messages", []))


class RealTokens(ByteTokens):
    """llama-server's counts, per message and cached: what a message adds to a prompt when it is
    not the last one (a last assistant message renders as a prefill). That a prompt is the sum of
    its messages is checked at the start."""

    ANCHOR = {"role": "user", "content": "x"}

    def __init__(self, root: str):
        super().__init__("llama-server /apply-template + /tokenize")
        self.root, self._texts, self._messages = root, dict[str, int](), dict[str, int]()
        self.alone = self._templated([self.ANCHOR])
        self.frame = 2 * self.alone - self._templated([self.ANCHOR, self.ANCHOR])
        function = {"name": "shell_exec", "arguments": '{"command": "ls"}'}
        call = {"role": "assistant", "content": "w", "tool_calls": [{"function": function}]}
        tool = {"role": "tool", "content": "exit code 0\nfile"}
        sample = [{"role": "system", "content": "s"}, self.ANCHOR, flat(call), tool]
        if self._templated(sample) != self.prompt({"messages": sample}):
            print("warning: a prompt does not count the sum of its messages' tokens")

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        headers = {"Content-Type": "application/json"}
        request = urllib.request.Request(self.root + path, json.dumps(body).encode(), headers)
        with urllib.request.urlopen(request, timeout=120) as answer:
            return json.load(answer)

    def endpoint(self, path: str, body: dict[str, Any]) -> Any:
        """What the real llama-server answers on `/apply-template` and `/tokenize`."""
        return self._post(path, body) if path in ("/apply-template", "/tokenize") else None

    def _tokens(self, text: str, special: bool) -> int:
        return len(self._post("/tokenize", {"content": text, "add_special": special})["tokens"])

    def _templated(self, messages: list[dict[str, str]]) -> int:
        prompt = self._post("/apply-template", {"messages": messages})["prompt"]
        return self._tokens(prompt, special=True)

    def text(self, text: str) -> int:
        if text not in self._texts:
            self._texts[text] = self._tokens(text, special=False)
        return self._texts[text]

    def message(self, wire: dict[str, Any]) -> int:
        key = json.dumps(plain := flat(wire))
        if key not in self._messages:
            self._messages[key] = self._templated([plain, self.ANCHOR]) - self.alone
        return self._messages[key]


@contextmanager
def tokenizer(forced_bytes: bool) -> Iterator[ByteTokens]:
    """The real tokenizer when llama-server is installed, else bytes/4, saying why."""
    sys.path.insert(0, str(PROJECT_ROOT / "scripts"))
    from real_server import RealServer, RealServerError, binary_path

    why = "forced by --bytes4" if forced_bytes else None
    if why is None and binary_path() is None:
        why = "llama-server is not installed: python scripts/real_server.py install"
    if why is None:
        try:
            with RealServer(ctx=2048) as server:
                yield RealTokens(server.root_url)
                return
        except RealServerError as e:
            why = f"llama-server did not start: {e}"
    yield ByteTokens(f"bytes/4 + 4 per message, NOT a real tokenizer ({why})")
