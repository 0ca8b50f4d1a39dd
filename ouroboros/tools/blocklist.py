"""Commands the agent may not run, whatever it was told: they can damage the machine itself.

A fast, clear first answer, not the confinement (that is the kernel's job, `sandbox.py`: no list
of words stops `python3 -c "import shutil; shutil.rmtree(...)"`). The command is split the way
the shell splits it (quotes, `;`, `&&`, `|`, `$(...)`, `bash -c "..."`), and each simple command
is judged by its program (path and case ignored: `/usr/bin/SUDO` is sudo) and its arguments, so
that `grep -r sudo docs/` and `cp /etc/hosts ./hosts` pass. Linear in the command's length.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator, Sequence

SYSTEM_DIRS = (
    "/etc", "/bin", "/sbin", "/usr", "/lib", "/lib32", "/lib64", "/boot", "/sys", "/proc",
    "/var", "/opt", "/root", "/dev", "/srv", "/home", "/mnt", "/media",
)  # fmt: skip
HARMLESS_DEVICES = {"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty", "/dev/zero"}
SEPARATORS = {";", ";;", "&", "&&", "|", "||", "(", ")", "{", "}", "!", "`"}
WRAPPERS = {
    "env", "nohup", "exec", "command", "builtin", "time", "nice", "ionice", "stdbuf", "setsid",
    "xargs", "then", "do", "else", "chroot", "unbuffer", "watch", "strace", "timeout", "if",
    "while", "until",
}  # fmt: skip
SHELLS = {"sh", "bash", "dash", "zsh", "ksh", "fish", "eval"}
Argv = list[str]


OPERATORS = (";;", "&&", "||", ">>", ">|", "<(", "$(", ";", "&", "|", "(", ")", "<", ">", "`")
OPERATOR_STARTS = frozenset(op[0] for op in OPERATORS)


def _split(command: str) -> list[str]:
    """Words and operators, as the shell splits them: quotes kept together, backslashes
    escaping, newlines ending a command. One pass (the standard `shlex` is quadratic in the
    length of a word)."""
    tokens: list[str] = []
    word: list[str] = []
    i, n = 0, len(command)
    while i < n:
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


def fork_bomb(tokens: Sequence[str]) -> bool:
    """A function whose body pipes it into itself (`:(){ :|:& };:`, `f() { f | f & }`)."""
    for i in range(len(tokens) - 2):
        if tokens[i + 1 : i + 3] != ["(", ")"]:
            continue
        name, body = tokens[i], tokens[i + 3 : i + 3 + 64]
        end = body.index("}") if "}" in body else len(body)
        body = [t.strip("{}") for t in body[:end]]
        if any(body[j : j + 3] == [name, "|", name] for j in range(len(body) - 2)):
            return True
    return False


def program(word: str) -> str:
    return posixpath.basename(word).lower()


def simple_commands(command: str, depth: int = 0) -> Iterator[Argv]:
    """The simple commands of a command line, their programs first, wrappers taken off."""
    argv: Argv = []
    for token in [*_split(command), ";"]:
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


def _operands(argv: Argv) -> list[str]:
    return [a for a in argv[1:] if not a.startswith("-")]


def _recursive(argv: Argv) -> bool:
    short = "".join(a for a in argv[1:] if a.startswith("-") and not a.startswith("--"))
    return "r" in short.lower() or "--recursive" in argv or "--no-preserve-root" in argv


class Blocklist:
    """Named rules, and the configured patterns (regular expressions, any case)."""

    def __init__(
        self,
        enabled: bool = True,
        patterns: Sequence[str] = (),
        workspace: str = "",
        protected: Sequence[str] = (),
    ):
        self.enabled = enabled
        self.patterns = [(p, re.compile(p, re.IGNORECASE)) for p in patterns]
        self.workspace = workspace.rstrip("/")
        """Paths in it are the agent's own, wherever it lies (`/home/me/project`)."""
        self.protected = [p.rstrip("/") for p in protected]
        """The harness's own files (the state folder): no command may name them. Where the
        kernel confines commands it refuses them anyway; elsewhere this is all there is."""

    def reason(self, command: str) -> str | None:
        """The name of the rule the command breaks, or None if it may run."""
        if not self.enabled:
            return None
        tokens = _split(command)
        if fork_bomb(tokens):
            return "fork bomb"
        if any(
            t in (">", ">>", ">|") and i + 1 < len(tokens) and self.system(tokens[i + 1])
            for i, t in enumerate(tokens)
        ):
            return "write to a system folder"
        if any(map(self.harness_owns, tokens)):
            return "the harness's own files"
        for argv in simple_commands(command):
            rule = self.rule_broken(argv)
            if rule:
                return rule
        return next((f"matches {p!r}" for p, c in self.patterns if c.search(command)), None)

    def rule_broken(self, argv: Argv) -> str | None:
        name, operands = program(argv[0]), _operands(argv)
        if name in ("sudo", "su", "doas", "pkexec", "runuser"):
            return "sudo"
        if name.startswith("mkfs") or name in ("fdisk", "sfdisk", "parted", "wipefs", "mkswap"):
            return "mkfs or a raw device"
        if name == "dd" and any(a.lower().startswith("of=/dev/") for a in operands):
            return "mkfs or a raw device"
        if name in ("shutdown", "reboot", "halt", "poweroff") or (
            name in ("init", "telinit") and any(a in ("0", "6") for a in operands)
        ):
            return "shutdown or reboot"
        if name == "systemctl" and any(a in ("poweroff", "reboot", "halt") for a in operands):
            return "shutdown or reboot"
        if name == "killall5" or (name in ("kill", "pkill") and "-1" in argv[2:]):
            return "kill every process"
        if name == "rm" and _recursive(argv) and any(map(self.reaches_out, operands)):
            return "rm -rf of / or home"
        if name == "find" and self.find_deletes(argv):
            return "find that deletes from / or home"
        if self.changes_system(name, argv, operands):
            return "change a system folder"
        return None

    def harness_owns(self, word: str) -> bool:
        """A path (as the command names it, from the workspace) in a protected folder."""
        if not self.protected or "/" not in word:
            return False
        path = posixpath.normpath(posixpath.join(self.workspace or "/", word.split("=")[-1]))
        return any(path == p or path.startswith(p + "/") for p in self.protected)

    def system(self, path: str) -> bool:
        """A path in a system folder, or home, and not in the workspace."""
        if path.startswith(("~", "$HOME", "${HOME}")):
            return True
        norm = posixpath.normpath(path) if path.startswith("/") else path
        if norm in HARMLESS_DEVICES or norm.startswith("/dev/fd/"):
            return False
        if self.workspace and (norm == self.workspace or norm.startswith(self.workspace + "/")):
            return False
        return (
            norm == "/"
            or norm.startswith("/*")
            or any(norm == d or norm.startswith(d + "/") for d in SYSTEM_DIRS)
        )

    def reaches_out(self, path: str) -> bool:
        """/, home, a system folder, or a relative path that climbs out (`..`, `../../`)."""
        return (
            path in ("/", "/*", "*")
            or self.system(path)
            or posixpath.normpath(path).startswith("..")
        )

    def find_deletes(self, argv: Argv) -> bool:
        roots = _operands(argv)[:1]
        after_exec = argv[argv.index("-exec") + 1 :][:1] if "-exec" in argv else []
        deletes = "-delete" in argv or any(program(a) in ("rm", "shred") for a in after_exec)
        return deletes and any(map(self.reaches_out, roots))

    def changes_system(self, name: str, argv: Argv, operands: list[str]) -> bool:
        if name in ("rm", "rmdir", "shred", "unlink", "truncate"):
            return any(map(self.system, operands))
        if name in ("chmod", "chown", "chgrp", "chattr"):  # the first operand: mode or owner
            return any(map(self.system, operands[1:])) or (
                _recursive(argv) and any(map(self.reaches_out, operands[1:]))
            )
        if name == "tee":
            return any(map(self.system, operands))
        if name in ("cp", "mv", "ln", "install", "rsync"):  # the destination only
            return any(map(self.system, operands[-1:]))
        return name == "dd" and any(self.system(a[3:]) for a in operands if a.startswith("of="))
