"""Shell command lines split the way bash splits them, into simple commands: the block list's
reading of a command. One pass, linear in the command's length (the standard `shlex` is
quadratic in the length of a word)."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator

SEPARATORS = {";", ";;", "&", "&&", "|", "||", "(", ")", "{", "}", "!", "`"}
WRAPPERS = {
    "env", "nohup", "exec", "command", "builtin", "time", "nice", "ionice", "stdbuf", "setsid",
    "xargs", "then", "do", "else", "chroot", "unbuffer", "watch", "strace", "timeout", "if",
    "while", "until", "busybox", "toybox", "systemd-run", "catchsegv",
}  # fmt: skip
SHELLS = {"sh", "bash", "dash", "zsh", "ksh", "fish", "eval"}
Argv = list[str]

OPERATORS = (";;", "&&", "||", ">>", ">|", "<(", "$(", ";", "&", "|", "(", ")", "<", ">", "`")
OPERATOR_STARTS = frozenset(op[0] for op in OPERATORS)
_ORDINARY = re.compile(r"[^\s'\"\\;&|()<>`$]+")
"""A run of characters that never end a word or start an operator: taken in one step."""


def split_words(command: str) -> list[str]:
    """Words and operators, as the shell splits them: quotes kept together, backslashes
    escaping, newlines ending a command. One pass (the standard `shlex` is quadratic in the
    length of a word)."""
    tokens: list[str] = []
    word: list[str] = []
    i, n = 0, len(command)
    while i < n:
        run = _ORDINARY.match(command, i)
        if run:
            word.append(run.group())
            i = run.end()
            continue
        char = command[i]
        if char in "'\"":
            i = _quoted(command, i, word)
            continue
        if char == "\\" and i + 1 < n:
            word.append(command[i + 1])
            i += 2
            continue
        operator = ""
        if char in OPERATOR_STARTS:
            operator = next((op for op in OPERATORS if command.startswith(op, i)), "")
        if char.isspace() or (operator and operator not in ("$(", "<(")):
            if word:
                tokens.append("".join(word))
                word.clear()
            if char.isspace():
                tokens.extend([";"] if char == "\n" else [])
                operator = char
            else:
                tokens.append(operator)
        else:
            word.append(operator or char)
        i += len(operator) or 1
    if word:
        tokens.append("".join(word))
    return tokens


def _quoted(command: str, start: int, word: list[str]) -> int:
    """Add the quoted text starting at `start` to `word`; where the text after it begins."""
    quote, i = command[start], start + 1
    word.append("")  # an empty quoted word is still a word
    while i < len(command) and command[i] != quote:
        if command[i] == "\\" and quote == '"' and i + 1 < len(command):
            i += 1
        word.append(command[i])
        i += 1
    return i + 1


def program(word: str) -> str:
    return posixpath.basename(word).lower()


def simple_commands(command: str, depth: int = 0) -> Iterator[Argv]:
    """The simple commands of a command line, their programs first, wrappers taken off."""
    argv: Argv = []
    for token in [*split_words(command), ";"]:
        for start in ("$(", "<("):
            if token.startswith(start):  # a command substitution starts a command
                yield from _unwrapped(argv, depth)
                argv, token = [], token[len(start) :]
        if token in SEPARATORS:
            yield from _unwrapped(argv, depth)
            argv = []
        elif token:
            argv.append(token)


def _unwrapped(argv: Argv, depth: int) -> Iterator[Argv]:
    while argv and "=" in argv[0] and not argv[0].startswith(("=", "-")):
        argv = argv[1:]  # NAME=value before the program
    while argv and program(argv[0]) in WRAPPERS:
        argv = argv[1:]
        while argv and (argv[0].startswith("-") or "=" in argv[0] or argv[0].isdigit()):
            argv = argv[1:]  # the wrapper's own options (`env -i X=1`, `timeout 5`, `nice -n 5`)
    if not argv:
        return
    if program(argv[0]) in SHELLS and depth < 3:
        script = next((a for a in argv[1:] if not a.startswith("-")), "")
        yield from simple_commands(script, depth + 1)  # `bash -c "..."`, `eval "..."`
    yield argv
