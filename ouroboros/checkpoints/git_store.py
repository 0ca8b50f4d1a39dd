"""The checkpoint repository: the `git` binary, run with an environment of our own (no user or
system configuration, no hooks), does all the storing.

Git never reads a file of the workspace here: it lists the workspace (its `.gitignore` rules
applied, links never followed, FIFOs and devices skipped), and takes the contents the harness
read itself without following links (`workspace_files.py`) through `git fast-import`, as bytes:
no `.gitattributes` filter or line-ending conversion applies on the way in or out.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import anyio
from anyio.abc import ByteReceiveStream

from ouroboros.checkpoints.cache import MARKS

IDENTITY = "ouroboros <ouroboros@localhost>"
LEFT_OUT = "left out: "
"""How a commit's message lists the files past the size limit (a JSON list, one line)."""
OUTPUTS = b".outputs/"
"""The harness's own outputs in the workspace (`context/truncate.py` SAVED_FOLDER)."""
EXCLUDED = f"/{OUTPUTS.decode()}\n"
RULES = b".gitignore"
RULES_HELD = "every .gitignore git reads held"
"""A checkpoint's message line: it holds the `.gitignore` files that ignore themselves too (one
of a harness before it does not: a rewind to it leaves such files of today as they are)."""
OPTIONS = (
    *("-c", "core.hooksPath=/dev/null"),
    *("-c", "core.fsmonitor=false"),
    *("-c", "gc.autoDetach=false"),
    *("-c", "core.packedGitLimit=256m"),
    *("-c", "core.packedGitWindowSize=32m"),
    *("-c", "pack.windowMemory=256m"),
    *("-c", "pack.threads=1"),
)
"""No hook runs, no file-system monitor starts, no `gc` goes on in the background once git
returns (a repository's own settings, for any git); and git keeps to `MEMORY_BYTES`."""
MEMORY_BYTES = 1 << 30
"""The address space each git process may take (`ulimit -v`): what the workspace makes git read
(a `.gitignore` of gigabytes, sparse on disk) fails it rather than taking the machine's memory.
A file of up to `checkpoints.max_bytes` fits, up to a few hundred MB."""


GIT_TIMEOUT_S = 600.0
LIST_TIMEOUT_S = 10.0
"""Git lists a workspace of 100,000 files in about a second; longer, it is stuck on a FIFO where
it reads (a `.gitignore`, a `HEAD` of a repository inside), and the workspace is walked instead."""


class GitFailed(Exception):
    """Git is missing, or said no: one line saying why."""


class GitStuck(GitFailed):
    """Git did not finish in its time (killed)."""


class Unlisted(GitFailed):
    """Git could not list the workspace."""


@dataclass(frozen=True)
class Entry:
    mode: str
    """`100644`, `100755` or `120000` (a symbolic link, stored as its target)."""
    oid: str


Tree = dict[bytes, Entry]
"""A commit's files by path (bytes: any name a file system allows)."""


@dataclass(frozen=True)
class Repo:
    git_dir: Path
    work_tree: Path

    def env(self) -> dict[str, str]:
        nowhere = "/nonexistent"
        return {
            "PATH": os.environ.get("PATH", os.defpath),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_ATTR_NOSYSTEM": "1",
            "HOME": nowhere,
            "XDG_CONFIG_HOME": nowhere,
            "GIT_DIR": str(self.git_dir),
            "GIT_WORK_TREE": str(self.work_tree),
            "GIT_AUTHOR_NAME": "ouroboros",
            "GIT_AUTHOR_EMAIL": "ouroboros@localhost",
            "GIT_COMMITTER_NAME": "ouroboros",
            "GIT_COMMITTER_EMAIL": "ouroboros@localhost",
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_NO_REPLACE_OBJECTS": "1",
            "LC_ALL": "C",
        }

    def _command(self, args: tuple[str, ...]) -> list[str]:
        git = shutil.which("git", path=self.env()["PATH"])
        if git is None:
            raise GitFailed("git is not installed (no `git` on PATH)")
        limited = f'ulimit -v {MEMORY_BYTES // 1024} && exec "$0" "$@"'
        return ["/bin/sh", "-c", limited, git, *OPTIONS, *args]

    async def run(
        self, *args: str, stdin: bytes | None = None, timeout: float = GIT_TIMEOUT_S
    ) -> bytes:
        env = self.env()
        if args[0] == "init":  # it makes the repository GIT_DIR would name, and has no work tree
            del env["GIT_DIR"], env["GIT_WORK_TREE"]
        try:
            with anyio.fail_after(timeout):
                done = await anyio.run_process(
                    self._command(args), input=stdin, env=env, cwd=self.work_tree, check=False
                )
        except TimeoutError:
            raise GitStuck(f"git {args[0]} did not finish in {timeout:.0f} s") from None
        except OSError as e:
            raise GitFailed(f"git {args[0]}: {e.strerror or e}") from None
        if done.returncode != 0:
            raise GitFailed(f"git {args[0]} failed: {_said(done.stderr)}")
        return done.stdout

    async def ready(self) -> None:
        """The repository, made where there is none; its exclusions set."""
        if not (self.git_dir / "HEAD").exists():
            await self.run("init", "--quiet", "--bare", "--template=", str(self.git_dir))
        info = self.git_dir / "info"
        info.mkdir(exist_ok=True)
        (info / "exclude").write_text(EXCLUDED)

    async def listing(self) -> list[bytes]:
        """The workspace's files and links that are not ignored (another repository inside it,
        listed as its folder, left out: it is its own history), and every `.gitignore` git
        reads, one that ignores itself too (`.venv/.gitignore` of `*`): which rules held is part
        of what the workspace was. But the harness's outputs, which a `.gitignore` line of the
        workspace could bring back past `info/exclude`."""
        listed = await self._list("--others", "--exclude-standard")
        found = listed + await self.ignored_rules()
        return sorted(p for p in found if not p.startswith(OUTPUTS))

    async def ignored_rules(self) -> list[bytes]:
        """The `.gitignore` files git reads that ignore themselves (or a rule above ignores);
        an ignored folder's own are never read: `--directory` names the folder instead."""
        ignored = ("--others", "--ignored", "--exclude-standard", "--directory")
        found = await self._list(*ignored, "--", f":(glob)**/{RULES.decode()}")
        return [p for p in found if is_rules(p)]

    async def _list(self, *args: str) -> list[bytes]:
        try:
            out = await self.run("ls-files", "-z", *args, timeout=LIST_TIMEOUT_S)
        except GitFailed as e:
            raise Unlisted(
                f"git could not list the workspace ({e}): a FIFO where git reads, such as a "
                ".gitignore, or a .gitignore of gigabytes?"
            ) from None
        return [p for p in out.split(b"\0") if p and not p.endswith(b"/")]

    async def fast_import(self, stream: AsyncIterator[bytes]) -> bytes:
        """Feed `stream` to `git fast-import`; what it printed (the marks asked for)."""
        marks = f"--export-marks={self.git_dir / MARKS}"
        args = ("fast-import", "--quiet", "--force", "--done", marks)
        found: dict[str, bytes] = {}

        async def drain(name: str, source: ByteReceiveStream | None) -> None:
            chunks = [chunk async for chunk in source] if source is not None else []
            found[name] = b"".join(chunks)

        try:
            process = await anyio.open_process(
                self._command(args),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=self.env(),
                cwd=self.work_tree,
            )
        except OSError as e:
            raise GitFailed(f"git fast-import: {e.strerror or e}") from None
        async with process:
            with anyio.move_on_after(GIT_TIMEOUT_S) as deadline:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(drain, "out", process.stdout)
                    tg.start_soon(drain, "err", process.stderr)
                    assert process.stdin is not None
                    try:
                        async for chunk in stream:
                            await process.stdin.send(chunk)
                    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                        pass  # it stopped reading: its exit status says why
                    await process.stdin.aclose()
            if deadline.cancelled_caught:
                process.kill()
            code = await process.wait()
        if deadline.cancelled_caught:
            self._clear_debris()
            raise GitStuck(f"git fast-import did not finish in {GIT_TIMEOUT_S:.0f} s")
        if code != 0:
            self._clear_debris()
            raise GitFailed(f"git fast-import failed: {_said(found.get('err', b''))}")
        return found.get("out", b"")

    def _clear_debris(self) -> None:
        """What a failed fast-import leaves (its part-written pack, its crash report): on a
        full disk that is the room the journal needs, and nothing refers to it."""
        debris = [
            *self.git_dir.glob("objects/pack/tmp_*"),
            *self.git_dir.glob("fast_import_crash_*"),
        ]
        for path in debris:
            path.unlink(missing_ok=True)

    async def tree(self, commit: str) -> Tree:
        out = await self.run("ls-tree", "-r", "-z", "--full-tree", commit)
        tree: Tree = {}
        for item in out.split(b"\0"):
            if item:
                head, path = item.split(b"\t", 1)
                mode, _, oid = head.decode().split(" ")
                tree[path] = Entry(mode, oid)
        return tree

    async def left_out(self, commit: str) -> set[bytes]:
        """The paths a commit left out (past the size limit)."""
        message = (await self.run("cat-file", "commit", commit)).decode(errors="replace")
        for line in message.splitlines():
            if line.startswith(LEFT_OUT):
                return {os.fsencode(p) for p in json.loads(line[len(LEFT_OUT) :])}
        return set()

    async def holds_rules(self, commit: str) -> bool:
        """Whether a commit holds every `.gitignore` git read (`RULES_HELD`)."""
        message = (await self.run("cat-file", "commit", commit)).decode(errors="replace")
        return RULES_HELD in message.splitlines()

    async def blobs(self, oids: list[str]) -> dict[str, bytes]:
        """The contents of these objects, by id."""
        if not oids:
            return {}
        out = await self.run("cat-file", "--batch", stdin="\n".join(oids).encode() + b"\n")
        found, at = {}, 0
        while at < len(out):
            end = out.index(b"\n", at)
            oid, kind, *size = out[at:end].decode().split(" ")
            if kind == "missing" or not size:
                raise GitFailed(f"object {oid} is missing from {self.git_dir}")
            found[oid] = out[end + 1 : end + 1 + int(size[0])]
            at = end + 1 + int(size[0]) + 1
        return found


def is_rules(path: bytes) -> bool:
    """A `.gitignore` file: what git leaves out of a listing beneath its folder."""
    return path.rsplit(b"/", 1)[-1] == RULES


def _said(stderr: bytes) -> str:
    lines = [line for line in stderr.decode(errors="replace").splitlines() if line.strip()]
    return " ".join((lines[-1] if lines else "no message").split())[:300]


def quoted(path: bytes) -> bytes:
    """A path as `git fast-import` reads any name: C-style quoted (newlines and all)."""
    out = bytearray(b'"')
    for byte in path:
        if byte in b'"\\':
            out += b"\\" + bytes([byte])
        elif byte < 0x20 or byte >= 0x7F:
            out += b"\\%03o" % byte
        else:
            out.append(byte)
    return bytes(out + b'"')


def commit_header(ref: str, mark: int, message: str) -> bytes:
    text = message.encode()
    return (
        (
            f"commit {ref}\nmark :{mark}\ncommitter {IDENTITY} {int(time.time())} +0000\n"
            f"data {len(text)}\n"
        ).encode()
        + text
        + b"\ndeleteall\n"
    )
