"""Find out what is on the other end: which server, whether the model is there, its real window."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from ouroboros.ground.figures import WINDOW_RANGE, window_tokens
from ouroboros.model.cache_check import slots_warning
from ouroboros.model.llm import FatalError, LLMClient, LLMError, TransientError, shown

ServerKind = Literal["ollama", "llama-server", "vllm", "lmstudio", "unknown"]
CONSERVATIVE_CONTEXT = 4096
"""Used when the server does not say: Ollama's own default on small machines."""


@dataclass(frozen=True)
class ServerInfo:
    kind: ServerKind
    context_window: int | None
    """What the server really runs with, or None if it would not say (or said no window)."""
    detail: str
    """Where the window figure came from, for the log (and what it said, when no window)."""
    renders_tools: bool | None = None
    """False when the server says the model's chat template drops tool schemas (llama-server
    `/props` `chat_template_caps.supports_tools`); None when it does not say."""

    counts_whole_prompt: bool = True
    """False when the usage counts only the prompt tokens the server had to process, leaving
    out its cache (Ollama 0.30.0, and Ollama before 0.2.0)."""
    frame_tokens: int | None = None
    """Tokens the model's chat template puts around each message, where the server can say
    (llama-server's `/apply-template` and `/tokenize`): 4 to 6 with a template of special
    tokens, 15 with the ChatML fallback on a model whose vocabulary lacks them."""
    cache_warnings: tuple[str, ...] = ()
    """Settings of the server that defeat its prompt cache, with the flag to use."""
    no_window: bool = False
    """True when the server stated a figure where its window belongs that is none
    (`window_tokens`): taken as not reported, with a warning."""

    @property
    def truncates_silently(self) -> bool:
        """llama-server and vLLM refuse an oversized prompt with a 400; they never cut it."""
        return self.kind not in ("llama-server", "vllm")


def stated(kind: ServerKind, figure: object, detail: str, **more: Any) -> ServerInfo:
    """What discovery found, with the window the server stated at `detail`, if it is one: a
    figure that is none is no window reported (`detail` then says what it was)."""
    window = window_tokens(figure)
    if window is None and figure is not None:
        detail = f"{detail} {shown(figure)}, no window"
    return ServerInfo(kind, window, detail, no_window=window is None and figure is not None, **more)


def root_url(base_url: str) -> str:
    """`http://host:port/v1` → `http://host:port` (native endpoints live at the root)."""
    url = base_url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


async def _get(client: LLMClient, url: str) -> Any:
    try:
        return await client.get_json(url)
    except LLMError:
        return None


async def _ollama_window(client: LLMClient, root: str, model: str) -> tuple[object, str]:
    """The window Ollama states, as it states it, and where: the loaded model's, else the
    Modelfile's `num_ctx` (at most the length it was trained for)."""
    names = {model, f"{model}:latest"}  # Ollama lists an untagged name as ":latest"

    async def loaded() -> object:
        ps = await _get(client, f"{root}/api/ps")
        for entry in (ps or {}).get("models", []) if isinstance(ps, dict) else []:
            if entry.get("name") in names or entry.get("model") in names:
                return entry.get("context_length")
        return None

    # Load it the way /v1 will (default options) before asking: /api/ps only knows loaded
    # models, and one loaded by another client with another num_ctx is reloaded by our first
    # /v1 call anyway (servers.md, "reload trap").
    try:
        await client.post_json(f"{root}/api/generate", {"model": model})
    except LLMError:
        pass
    window = await loaded()
    if window_tokens(window) is not None:
        return window, "ollama /api/ps context_length"
    try:
        show = await client.post_json(f"{root}/api/show", {"model": model})
    except LLMError:
        show = None
    info = (show.get("model_info") or {}) if isinstance(show, dict) else {}
    trained = next((v for k, v in info.items() if k.endswith(".context_length")), None)
    parameters = show.get("parameters", "") if isinstance(show, dict) else ""
    for line in str(parameters).splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "num_ctx" and parts[1].isdigit():
            num_ctx = int(parts[1])
            bound = window_tokens(trained)
            return (min(num_ctx, bound) if bound else num_ctx), "ollama Modelfile num_ctx"
    if window is not None:  # what /api/ps said, no window: discovery says so
        return window, "ollama /api/ps context_length"
    return None, "ollama did not report a window"


async def discover(client: LLMClient, base_url: str, model: str) -> ServerInfo:
    """Probe the native endpoints of each known server, cheapest first."""
    root = root_url(base_url)
    try:
        models = await client.get_json(f"{base_url.rstrip('/')}/models")
    except TransientError as e:
        raise TransientError(
            f"cannot reach a model server at {base_url} ({e}): start it "
            "(for Ollama: `ollama serve`) or set llm.base_url"
        ) from e
    except LLMError:
        models = None
    version = await _get(client, f"{root}/api/version")
    if isinstance(version, dict) and "version" in version:
        tags = await _get(client, f"{root}/api/tags")
        names = {m.get("name") for m in (tags or {}).get("models", [])} if tags else set()
        if tags is not None and model not in names and f"{model}:latest" not in names:
            raise FatalError(
                f"model {model!r} is not pulled on this Ollama server: run `ollama pull {model}`"
            )
        window, detail = await _ollama_window(client, root, model)
        number = str(version["version"])
        return stated(
            "ollama",
            window,
            f"{detail} (Ollama {number})",
            counts_whole_prompt=_ollama_counts_whole_prompt(number),
        )
    props = await _get(client, f"{root}/props")
    if isinstance(props, dict) and "default_generation_settings" in props:
        n_ctx = props["default_generation_settings"].get("n_ctx")
        tools = (props.get("chat_template_caps") or {}).get("supports_tools")
        slots = slots_warning(props)
        return stated(
            "llama-server",
            n_ctx,
            "llama-server /props n_ctx",
            renders_tools=tools if isinstance(tools, bool) else None,
            frame_tokens=await _llama_frame(client, root),
            cache_warnings=(slots,) if slots else (),
        )
    lmstudio = await _get(client, f"{root}/api/v1/models")
    if isinstance(lmstudio, dict) and "models" in lmstudio:
        for entry in lmstudio["models"]:
            for instance in entry.get("loaded_instances") or []:
                if model in (entry.get("key"), instance.get("id")):
                    window = (instance.get("config") or {}).get("context_length")
                    return stated("lmstudio", window, "LM Studio loaded context_length")
        return ServerInfo("lmstudio", None, "LM Studio: model not loaded")
    for entry in (models or {}).get("data", []) if isinstance(models, dict) else []:
        if "max_model_len" in entry and entry.get("id") == model:
            return stated("vllm", entry["max_model_len"], "vLLM /v1/models max_model_len")
    return ServerInfo("unknown", None, "the server does not report its window")


async def _llama_frame(client: LLMClient, root: str) -> int | None:
    """Tokens one more message adds beyond its text: two one-word messages through the model's
    own template and tokenizer, less one, less the word."""

    async def tokens(content: str, special: bool) -> int:
        answer = await client.post_json(
            f"{root}/tokenize", {"content": content, "add_special": special}
        )
        return len(answer["tokens"])

    async def templated(count: int) -> int:
        messages = [{"role": "user", "content": "x"}] * count
        answer = await client.post_json(f"{root}/apply-template", {"messages": messages})
        return await tokens(str(answer["prompt"]), special=True)

    try:
        frame = await templated(2) - await templated(1) - await tokens("x", special=False)
    except (LLMError, KeyError, TypeError):
        return None  # an older build without these endpoints
    return frame if 0 <= frame <= 64 else None


def _ollama_counts_whole_prompt(version: str) -> bool:
    """servers.md 1b: `prompt_eval_count` left out cached tokens before 0.2.0 and again in
    0.30.0 (fixed in 0.30.1)."""
    parts = version.split("-")[0].split(".")
    try:
        major, minor = int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return True  # an unusual version string (a dev build): assume the usual semantics
    return not ((major, minor) < (0, 2) or version.split("-")[0] == "0.30.0")


def choose_window(configured: int, info: ServerInfo) -> tuple[int, str | None]:
    """The window to budget for, and a warning when the configuration and the server disagree."""
    real = info.context_window
    said = f"{info.kind} server did not report its context window"
    if info.no_window:
        said = (
            f"{info.kind} server stated no window ({info.detail}; a window is {WINDOW_RANGE}): "
            "taken as not reported"
        )
    if configured == 0:
        if real is None:
            return CONSERVATIVE_CONTEXT, (
                f"{said}; assuming {CONSERVATIVE_CONTEXT} tokens (set context.limit to override)"
            )
        return real, None
    if info.no_window:
        return configured, f"{said}; using context.limit, {configured:,}"
    if real is not None and real < configured:
        return real, (
            f"context.limit is {configured} but the server runs a {real}-token window "
            f"({info.detail}); using {real}"
        )
    return configured, None
