"""The trajectory as the model for `replay.py`: its steps, each step's reply as the loopback
server sends it, and the script that prints a step's recorded output in place of its command."""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from replay_tokens import ByteTokens, flat

from ouroboros.ground.config import Settings
from ouroboros.ground.messages import (
    AssistantMessage,
)
from ouroboros.model.scripted import Reply

DEFAULTS = Settings.model_construct()
"""The harness's defaults, whatever OUROBOROS_* variables this shell has."""
MAX_OUTPUT = DEFAULTS.llm.max_output_tokens
"""The tool runner saves an output over this many times the cap, and says where."""
PLACEHOLDER = re.compile(r"\[\w+ result masked")


@dataclass(frozen=True)
class Step:
    thought: str
    action: str | None
    observation: str
    returncode: int

    @property
    def output(self) -> str:
        """The result as `shell_exec` words it."""
        return f"exit code {self.returncode}\n{self.observation}"


def load_steps(path: Path) -> list[Step]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [
        Step(r["thought"] or "", r["action"], r["observation"] or "", r["returncode"] or 0)
        for r in rows
    ]


@dataclass(frozen=True)
class Served:
    """A step's reply as the server sends it."""

    text: str
    arguments: str | None
    """The `shell_exec` call's JSON arguments; None: no call."""
    completion: int
    whole_completion: int
    """Before the reply was shortened to fit `max_output_tokens`."""
    call_cut: bool = False
    """The call alone did not fit, so it stops at max_output_tokens, as a server stops."""
    at_limit: bool = False
    """Stopped at max_output_tokens as a server stops a reply: its call, after the thought,
    lost (`finish_reason: "length"`)."""

    def wire(self, call_id: str = "c") -> dict[str, Any]:
        function = {"name": "shell_exec", "arguments": self.arguments}
        call = {"id": call_id, "type": "function", "function": function}
        calls = [] if self.arguments is None else [call]
        return {"role": "assistant", "content": self.text, "tool_calls": calls}


class Trajectory:
    """The model: serves the first step not yet delivered; refuses what does not fit."""

    def __init__(
        self, steps: list[Step], tokens: ByteTokens, window: int, folder: Path, cut: bool = True
    ):
        self.steps, self.tokens, self.window, self.folder = steps, tokens, window, folder
        self.cut = cut
        """Serve a step too long for max_output_tokens first as a server stops it (`at_limit`);
        False: only ever shortened to fit, as the bench did before."""
        self.served: dict[int, Served] = {}
        self.limited: dict[int, Served] = {}
        """`at_limit`'s replies."""
        self.stopped: set[int] = set()
        """Steps served stopped at max_output_tokens (once each)."""
        self.serves: Counter[int] = Counter()
        self.call_steps: dict[str, int] = {}
        self.text_steps: dict[str, int] = {}
        self.delivered: set[int] = set()
        self.requests = self.overflows = 0
        for index, step in enumerate(steps):
            (folder / f"{index}.out").write_text(step.observation)
            (folder / f"{index}.code").write_text(str(step.returncode))

    def reply(self, index: int) -> Served:
        """The step's reply, its thought cut to the head that fits max_output_tokens."""
        if index not in self.served:
            step, count = self.steps[index], self.tokens.text
            arguments = None if step.action is None else json.dumps({"command": step.action})
            calls = count(flat(Served("", arguments, 0, 0).wire())["content"]) if arguments else 0
            whole = completion = count(step.thought) + calls
            keep = len(step.thought)
            if arguments and calls >= MAX_OUTPUT:
                cut = arguments[: len(arguments) * MAX_OUTPUT // calls]
                self.served[index] = Served("", cut, MAX_OUTPUT, whole, call_cut=True)
                return self.served[index]
            while completion >= MAX_OUTPUT:
                keep = int(keep * min(0.95, (MAX_OUTPUT - calls) / completion))
                completion = count(step.thought[:keep]) + calls
            self.served[index] = Served(step.thought[:keep], arguments, completion, whole)
        return self.served[index]

    def at_limit(self, index: int) -> Served | None:
        """The step's reply as a server stops it at max_output_tokens, where the whole reply
        does not fit (cut mode): the thought's head (all of it where only the call does not
        fit), the call lost. Served once: told to go on, the model writes the step again within
        the limit (`reply`), not stopping at the same place twice."""
        whole = self.reply(index)
        if not self.cut or whole.whole_completion < MAX_OUTPUT or whole.call_cut:
            return None  # a call alone longer than the limit is stopped in it by `reply`
        if index not in self.limited:
            thought, count = self.steps[index].thought, self.tokens.text
            keep = len(thought)
            while keep and count(thought[:keep]) > MAX_OUTPUT:
                keep = int(keep * min(0.95, MAX_OUTPUT / count(thought[:keep])))
            self.limited[index] = Served(
                thought[:keep], None, MAX_OUTPUT, whole.whole_completion, at_limit=True
            )
        return self.limited[index]

    def step_of(self, message: AssistantMessage) -> int | None:
        if message.tool_calls:
            return self.call_steps.get(message.tool_calls[0].id)
        return self.text_steps.get(message.content)

    def note_delivered(self, messages: list[dict[str, Any]]) -> None:
        for m in messages:
            if m["role"] == "tool" and not PLACEHOLDER.match(m["content"]):
                index = self.call_steps.get(m["tool_call_id"])
            elif m["role"] == "assistant" and not m.get("tool_calls"):
                index = self.text_steps.get(m["content"] or "")
            elif m["role"] == "assistant" and m["tool_calls"][0]["id"] not in self.call_steps:
                index = self.text_step_read(m)
            else:
                continue
            if index is not None:
                self.delivered.add(index)

    def text_step_read(self, message: dict[str, Any]) -> int | None:
        """The text-only step whose reply the harness read calls from (its ```bash blocks): the
        message keeps the reply's prose and holds those commands as calls, so every line of
        both is in the text served."""
        lines = (message["content"] or "").splitlines()
        for call in message["tool_calls"]:
            lines += str(json.loads(call["function"]["arguments"]).get("command", "")).splitlines()
        lines = [line.strip() for line in lines if line.strip()]
        return next(
            (i for text, i in self.text_steps.items() if lines and all(x in text for x in lines)),
            None,
        )

    def __call__(self, body: dict[str, Any]) -> Reply:
        self.requests += 1
        self.note_delivered(body["messages"])
        index = next((i for i in range(len(self.steps)) if i not in self.delivered), None)
        if index is None:
            summary = {"summary": f"replayed all {len(self.steps)} steps"}
            reply = Reply(tool_calls=[("finish", summary)], completion_tokens=20)
        else:
            stopped = None if index in self.stopped else self.at_limit(index)
            served = stopped or self.reply(index)
            call = [] if served.arguments is None else [("shell_exec", served.arguments)]
            reply = Reply(served.text, list(call), completion_tokens=served.completion)
            reply.call_ids = (f"call_{index + 1}_{self.serves[index] + 1}",)
        prompt = self.tokens.prompt(body)
        if prompt + (reply.completion_tokens or 0) > self.window:  # refused as llama-server does
            self.overflows += 1
            message = f"request ({prompt} tokens) exceeds the available context size"
            error = {"code": 400, "type": "exceed_context_size_error", "n_ctx": self.window}
            error |= {"message": f"{message} ({self.window} tokens)", "n_prompt_tokens": prompt}
            return Reply(status=400, error_body=error)
        if index is not None:
            self.serves[index] += 1
            (self.folder / "current").write_text(str(index))
            if served.at_limit:
                self.stopped.add(index)
            if self.steps[index].action is None:
                self.text_steps[reply.text] = index
            elif reply.tool_calls:  # else stopped at the limit: the step is still to come
                self.call_steps[reply.call_ids[0]] = index
        return reply


BASH_ENV = """\
# Sourced by every non-interactive bash the harness starts: the recorded output, then exit.
read -r step < "{folder}/current"
cat "{folder}/$step.out"
read -r code < "{folder}/$step.code"
exit "$code"
"""
