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
from collections.abc import Callable, Sequence

from ouroboros.tools.shellwords import Argv, program, simple_commands, split_words

SYSTEM_DIRS = (
    "/etc", "/bin", "/sbin", "/usr", "/lib", "/lib32", "/lib64", "/boot", "/sys", "/proc",
    "/var", "/opt", "/root", "/dev", "/srv", "/home", "/mnt", "/media", "/run",
)  # fmt: skip
HARMLESS_DEVICES = {"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty", "/dev/zero"}
HOME = re.compile(r"^(~|\$HOME\b|\$\{HOME\b)")
SUDO = {"sudo", "su", "doas", "pkexec", "runuser", "sudoedit", "run0"}
DISK_TOOLS = {
    "fdisk", "sfdisk", "cfdisk", "gdisk", "sgdisk", "parted", "wipefs", "mkswap", "mke2fs",
    "mkdosfs", "mkntfs", "blkdiscard", "cryptsetup",
}  # fmt: skip
KERNEL_TOOLS = {"insmod", "rmmod", "modprobe", "kexec", "swapoff", "swapon", "umount"}
SERVICE_CHANGES = {"stop", "disable", "mask", "kill", "isolate", "halt", "poweroff", "reboot"}
SERVICE_CHANGES |= {"kexec", "suspend", "hibernate", "rescue", "emergency", "default"}
FIREWALLS = {"iptables", "ip6tables", "nft", "ufw", "iptables-restore", "ebtables"}
LISTING = {"-L", "-S", "--list", "list", "-n", "-v", "--numeric", "status", "show"}
IP_CHANGES = {"set", "add", "del", "delete", "flush", "change", "replace"}
METADATA_TOOLS = {"chmod", "chown", "chgrp", "chattr", "setfacl", "setfattr", "setcap"}
FIND_RUNS = ("-exec", "-execdir", "-ok", "-okdir")


def _operands(argv: Argv) -> list[str]:
    return [a for a in argv[1:] if not a.startswith("-")]


def _short(argv: Argv, letter: str) -> bool:
    """`letter` among the short options (`-rf`, `-pi`, `-xzf`), in any case."""
    return any(letter in a.lower() for a in argv[1:] if a.startswith("-") and a[1:2] != "-")


def _recursive(argv: Argv) -> bool:
    return _short(argv, "r") or "--recursive" in argv or "--no-preserve-root" in argv


def fork_bomb(tokens: Sequence[str]) -> bool:
    """A function that starts itself in the background twice, or pipes itself into itself:
    `:(){ :|:& };:`, `f() { f & f; }`, `function f { f | f & }`."""
    for i in range(len(tokens) - 2):
        if tokens[i + 1 : i + 3] == ["(", ")"]:
            name, start = tokens[i], i + 3
        elif tokens[i] == "function":
            name = tokens[i + 1]
            start = i + 4 if tokens[i + 2 : i + 4] == ["(", ")"] else i + 2
        else:
            continue
        body = tokens[start : start + 64]
        end = body.index("}") if "}" in body else len(body)
        body = [t.strip("{}") for t in body[:end]]
        piped = any(body[j : j + 3] == [name, "|", name] for j in range(len(body) - 2))
        if piped or (body.count(name) >= 2 and "&" in body):
            return True
    return False


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
        tokens = split_words(command)
        if fork_bomb(tokens):
            return "fork bomb"
        if any(
            t in (">", ">>", ">|") and i + 1 < len(tokens) and self.system(tokens[i + 1])
            for i, t in enumerate(tokens)
        ):
            return "write to a system folder"
        if any(map(self.harness_owns, tokens)):
            return "the harness's own files"
        away = False
        """A `cd` took the command out of the workspace: relative paths are no longer ours."""
        for argv in simple_commands(command):
            if program(argv[0]) in ("cd", "pushd"):
                target = (_operands(argv) or ["~"])[0]
                away = self.reaches_out(target) or (away and not target.startswith("/"))
            rule = self.rule_broken(argv, away)
            if rule:
                return rule
        return next((f"matches {p!r}" for p, c in self.patterns if c.search(command)), None)

    def rule_broken(self, argv: Argv, away: bool = False) -> str | None:
        name, operands = program(argv[0]), _operands(argv)
        rule = self.machine_rule(name, argv, operands)
        if rule:
            return rule
        outside = self.reaches_out if not away else lambda path: True
        if name == "rm" and _recursive(argv) and any(map(outside, operands)):
            return "rm -rf of / or home"
        if name == "find" and self.find_deletes(argv, outside):
            return "find that deletes from / or home"
        if self.changes_system(name, argv, operands, outside):
            return "change a system folder"
        return None

    def machine_rule(self, name: str, argv: Argv, operands: list[str]) -> str | None:
        """Rules on what a command does to the machine, whatever paths it names."""
        if name in SUDO:
            return "sudo"
        if name.startswith("mkfs") or name in DISK_TOOLS:
            return "mkfs or a raw device"
        if name == "dd" and any(a.lower().startswith("of=/dev/") for a in operands):
            return "mkfs or a raw device"
        if name in ("shutdown", "reboot", "halt", "poweroff") or (
            name in ("init", "telinit") and any(a in ("0", "6") for a in operands)
        ):
            return "shutdown or reboot"
        if name in ("systemctl", "loginctl") and {"poweroff", "reboot", "halt"} & set(operands):
            return "shutdown or reboot"
        if name in ("systemctl", "loginctl", "service") and SERVICE_CHANGES & set(operands):
            return "stop a service"
        if name == "killall5" or (name in ("kill", "pkill") and "-1" in argv[2:]):
            return "kill every process"
        if name == "kill" and "1" in operands:
            return "kill every process"
        return self.kernel_or_network_rule(name, argv, operands)

    def kernel_or_network_rule(self, name: str, argv: Argv, operands: list[str]) -> str | None:
        if name in KERNEL_TOOLS or (name == "mount" and operands):
            return "change the kernel or the mounts"
        if name == "sysctl" and ("-w" in argv or any("=" in a for a in operands)):
            return "change the kernel or the mounts"
        if name in FIREWALLS and not set(argv[1:]) <= LISTING:
            return "change the network setup"
        if name == "ip" and IP_CHANGES & set(argv[2:]):
            return "change the network setup"
        return None

    def harness_owns(self, word: str) -> bool:
        """A path (as the command names it, from the workspace) in a protected folder."""
        if not self.protected or "/" not in word:
            return False
        path = posixpath.normpath(posixpath.join(self.workspace or "/", word.split("=")[-1]))
        return any(path == p or path.startswith(p + "/") for p in self.protected)

    def system(self, path: str) -> bool:
        """A path in a system folder, or home, and not in the workspace."""
        if HOME.match(path):
            return True
        if path.startswith("/"):
            # POSIX keeps a leading `//` apart; Linux does not: `//etc` is `/etc`.
            norm = posixpath.normpath("/" + path.lstrip("/"))
        else:
            norm = path
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

    def find_deletes(self, argv: Argv, outside: Callable[[str], bool]) -> bool:
        roots = _operands(argv)[:1]
        runs = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a in FIND_RUNS]
        deletes = "-delete" in argv or any(program(a) in ("rm", "shred") for a in runs)
        return deletes and any(map(outside, roots or ["."]))

    def changes_system(
        self, name: str, argv: Argv, operands: list[str], outside: Callable[[str], bool]
    ) -> bool:
        if name in ("rm", "rmdir", "shred", "unlink", "truncate", "mv"):  # mv: sources too
            return any(map(self.system, operands))
        if name in METADATA_TOOLS:  # the first operand: mode, owner or attribute
            return any(map(self.system, operands[1:])) or (
                _recursive(argv) and any(map(outside, operands[1:]))
            )
        if name in ("sed", "perl") and (_short(argv, "i") or "--in-place" in argv):
            return any(map(self.system, operands))
        if name == "tee":
            return any(map(self.system, operands))
        if name in ("cp", "ln", "install", "rsync"):  # the destination only
            return any(map(self.system, operands[-1:]))
        if name in ("tar", "unzip") and self.unpacks_into_system(name, argv):
            return True
        if name == "crontab":
            return "-r" in argv or bool(operands)
        return name == "dd" and any(self.system(a[3:]) for a in operands if a.startswith("of="))

    def unpacks_into_system(self, name: str, argv: Argv) -> bool:
        if name == "tar" and not (_short(argv, "x") or "--extract" in argv or "x" in argv[1]):
            return False  # tar -C /etc -cf backup.tar . only reads there
        option = "-d" if name == "unzip" else "-C"
        targets = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a in (option, "--directory")]
        targets += [a.split("=", 1)[1] for a in argv if a.startswith("--directory=")]
        return any(map(self.system, targets))
