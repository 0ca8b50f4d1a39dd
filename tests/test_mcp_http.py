"""A Streamable HTTP endpoint that answers what is not MCP: junk JSON gives one line and no
traceback; a JSON answer of 200 MB is never held whole (the harness reads at most
`mcp.max_message_mb` of it)."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pytest.importorskip("mcp", reason="the MCP client needs the [mcp] extra (pip install -e '.[mcp]')")

from ouroboros.model.scripted import Reply, ScriptedServer
from tests.conftest import Project

PEAK_OF_A_RUN = """
import resource, subprocess, sys
done = subprocess.run([sys.executable, "-m", "ouroboros", "run", "--fresh", "--max-turns", "1"])
print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""
"""The exit code and peak memory (KiB) of a run in a process of its own."""


class _Answers(BaseHTTPRequestHandler):
    """Every POST answered 200 with JSON that is not JSON-RPC: `megabytes` of it, or a little."""

    megabytes = 0

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(200)
        self.send_header("content-type", "application/json")
        size = self.megabytes << 20
        body = b'{"not": "json-rpc"}'
        self.send_header("content-length", str(size + 9 if size else len(body)))
        self.end_headers()
        try:
            if not size:
                self.wfile.write(body)
                return
            self.wfile.write(b'{"x": "')
            for _ in range(self.megabytes):
                self.wfile.write(b"x" * (1 << 20))
            self.wfile.write(b'"}')
        except OSError:
            pass  # the harness stopped reading: what is tested

    def log_message(self, *args: object) -> None:
        pass


def _serving(megabytes: int) -> Iterator[str]:
    handler = type("Answers", (_Answers,), {"megabytes": megabytes})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/mcp"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def junk() -> Iterator[str]:
    yield from _serving(0)


@pytest.fixture
def huge() -> Iterator[str]:
    yield from _serving(200)


def run(project: Project, url: str) -> tuple[subprocess.CompletedProcess[str], int]:
    """A one-turn run with this endpoint as its server, and its peak KiB."""
    mcp = {"servers": {"web": {"url": url, "startup_timeout_s": 20}}}
    with ScriptedServer([Reply(text="done")]) as server:
        project.configure(server.url, mcp=mcp)
        done = subprocess.run(
            [sys.executable, "-c", PEAK_OF_A_RUN],
            cwd=project.root,
            capture_output=True,
            text=True,
            timeout=120,
        )
    code, peak = done.stdout.split()[-2:]
    assert code == "0", done.stderr
    return done, int(peak)


@pytest.mark.slow
def test_an_endpoint_answering_junk_is_one_line(project: Project, junk: str) -> None:
    done, _ = run(project, junk)
    assert "Traceback" not in done.stderr + done.stdout, done.stderr[-2000:]
    (failed,) = [w["message"] for w in project.events("warning") if "did not start" in w["message"]]
    assert failed.startswith("MCP server web did not start: ")


@pytest.mark.slow
def test_an_answer_of_200_mb_is_never_held_whole(project: Project, junk: str, huge: str) -> None:
    _, small = run(project, junk)  # the SDK loaded, a small answer
    _, peak = run(project, huge)
    # Held whole it grows by 200 MB and more (2.9 GB measured); read with the cap, by a few MB.
    assert peak - small < 64 << 10, (small, peak)
    (failed,) = [w["message"] for w in project.events("warning") if "did not start" in w["message"]]
    assert "over 8 MB" in failed
