"""Engine discovery: which model to use, which engine it is, its context length, where its
tokenizer and metrics live — plus a `Tokenizer` that counts tokens with the engine itself.

`discover(client, base_url, ...)` -> `EngineInfo`. `/models` is required: when it is missing,
unreachable, erroring or unusable, `EndpointError` is raised (kind unreachable / http /
bad_payload / no_model) with a one-line message, never a traceback. Everything after that
(`/props`, `/tokenize`) is best effort and leaves a note when it does not work.
"""

from __future__ import annotations

import json
from typing import Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, SecretStr

from workloadlang.redact import redact
from workloadlang.run.endpoint import auth_headers, dumps, root_of
from workloadlang.run.errors import EndpointError, engine_message
from workloadlang.run.side import AnswerTooLarge, Side, SideError, call_again_if_dropped, side_of

EngineName = Literal["llamacpp", "vllm", "sglang", "ninfer", "workloadlang-sim", "unknown"]
TokenizeStyle = Literal["prompt", "content"]
_OWNERS: dict[str, EngineName] = {
    "llamacpp": "llamacpp", "llama.cpp": "llamacpp", "vllm": "vllm", "sglang": "sglang",
    "ninfer": "ninfer", "workloadlang-sim": "workloadlang-sim", "workloadlang": "workloadlang-sim",
}
_PROBE_TEXT = "Hello there, tokenizer probe."


class EngineInfo(BaseModel):
    """What discovery found. `max_context_source` says where `max_context` came from
    (`max_model_len`, `meta.n_ctx`, `/props default_generation_settings.n_ctx`, `--max-context`)
    or is None when unknown; `tokenize_style` is `prompt` (vLLM/SGLang body) or `content`
    (llama.cpp body) when `tokenize_url` works; `notes` are one-line remarks for the user."""

    model_config = ConfigDict(frozen=True)

    model: str
    models: list[str]
    notes: list[str] = Field(default_factory=list)
    max_context: int | None = None
    max_context_source: str | None = None
    engine: EngineName = "unknown"
    tokenize_url: str | None = None
    tokenize_style: TokenizeStyle | None = None
    metrics_url: str
    # requests the engine runs at once (llama.cpp `/props` `total_slots`); None when unknown
    slots: int | None = None
    # the engine's prefill time (`timings.prompt_ms`) holds only the request's own work, the
    # others waiting outside it: one slot, or `/props` `prefill_time: "own"` (see `prefill_own`)
    prefill_own: bool = False


class Tokenizer:
    """Counts tokens with the engine's own `/tokenize` route.

    `style="prompt"`: vLLM/SGLang body `{"model", "prompt"}` -> `count` or `len(tokens)`;
    `style="content"`: llama.cpp body `{"content"}` -> `len(tokens)`."""

    def __init__(
        self, client: Side | httpx.AsyncClient, url: str, style: TokenizeStyle, *,
        model: str | None = None, api_key: SecretStr | str | None = None, timeout: float = 30.0,
    ) -> None:
        self.client = side_of(client)
        self.calls = 0  # calls made (what the run reports: sizing should need few)
        self.url = url
        self.style: TokenizeStyle = style
        self.model = model
        self._headers = auth_headers(api_key)
        self.timeout = timeout

    @classmethod
    def from_info(
        cls, client: Side | httpx.AsyncClient, info: EngineInfo, api_key: SecretStr | str | None = None
    ) -> Tokenizer | None:
        """Output: a tokenizer for a discovered engine, or None when it has no working route."""
        if info.tokenize_url is None or info.tokenize_style is None:
            return None
        return cls(client, info.tokenize_url, info.tokenize_style, model=info.model, api_key=api_key)

    async def count(self, text: str) -> int:
        """Input: text. Output: its token count per the engine. Raises `EndpointError`."""
        body: dict[str, Any] = {"content": text}
        if self.style == "prompt":
            body = {"model": self.model, "prompt": text} if self.model else {"prompt": text}
        self.calls += 1
        payload = await _request_json(self.client, "POST", self.url, self._headers, self.timeout, body)
        n = _token_count(payload)
        if n is None:
            raise EndpointError("bad_payload", f"{self.url}: no token count in the answer", url=self.url)
        return n


def _token_count(payload: Any) -> int | None:
    """Input: a /tokenize answer. Output: `count`, else `len(tokens)`, else None."""
    if not isinstance(payload, dict):
        return None
    count = payload.get("count")
    if type(count) is int:
        return count
    tokens = payload.get("tokens")
    return len(tokens) if isinstance(tokens, list) else None


async def _request_json(
    client: Side, method: str, url: str, headers: dict[str, str], timeout: float,
    body: Any = None,
) -> Any:
    """Output: the decoded JSON answer. Raises `EndpointError` (unreachable / http / bad_payload)."""
    content = None if body is None else dumps(body)
    request_headers = {"Accept": "application/json", **headers}
    if content is not None:
        request_headers["Content-Type"] = "application/json"
    try:
        status, answer = await call_again_if_dropped(client, method, url, request_headers,
                                                     content, timeout)
    except AnswerTooLarge as exc:
        raise EndpointError("bad_payload", f"{url}: {exc}", url=url) from None
    except SideError as exc:
        what = exc.args[0] if exc.kind == "timeout" else f"cannot connect ({exc.args[0]})"
        raise EndpointError("unreachable", f"{url}: {what}", url=url) from None
    if status >= 400:
        key = headers.get("Authorization", "").removeprefix("Bearer ")  # never print an echoed key
        raise EndpointError(
            "http", f"{url}: HTTP {status}: {redact(engine_message(answer), key)}",
            url=url, status=status,
        )
    try:
        return json.loads(answer)
    except (ValueError, RecursionError):
        raise EndpointError("bad_payload", f"{url}: the answer is not JSON", url=url) from None


def model_items(payload: Any) -> list[dict[str, Any]]:
    """Input: a `/models` answer. Output: its model objects: OpenAI `data`, llama.cpp `models`
    or a bare list. Raises `EndpointError("bad_payload")` for any other shape."""
    items = payload
    if isinstance(payload, dict):
        items = payload.get("data")
        if not isinstance(items, list):
            items = payload.get("models")
    if not isinstance(items, list):
        raise EndpointError("bad_payload", "/models answer has no model list (expected `data`, `models` or a list)")
    return [item for item in items if isinstance(item, dict)]


def model_ids(items: list[dict[str, Any]]) -> list[str]:
    """Input: model objects. Output: their ids (`id`, falling back to `model`), empty ones skipped,
    duplicates removed, first-seen order kept."""
    ids: list[str] = []
    for item in items:
        mid = item.get("id") or item.get("model")
        if isinstance(mid, str) and mid and mid not in ids:
            ids.append(mid)
    return ids


def engine_of(item: dict[str, Any] | None) -> EngineName:
    """Input: the chosen model object. Output: the engine name from its `owned_by`."""
    owner = (item or {}).get("owned_by")
    return _OWNERS.get(owner.lower(), "unknown") if isinstance(owner, str) else "unknown"


def context_of(item: dict[str, Any] | None) -> tuple[int | None, str | None]:
    """Input: the chosen model object. Output: `(max_context, source)` from `max_model_len`, then
    llama.cpp `meta.n_ctx` (`meta` may be null while loading), else `(None, None)`."""
    item = item or {}
    value = item.get("max_model_len")
    if type(value) is int and value > 0:
        return value, "max_model_len"
    meta = item.get("meta")
    value = meta.get("n_ctx") if isinstance(meta, dict) else None
    if type(value) is int and value > 0:
        return value, "meta.n_ctx"
    return None, None


def choose_model(ids: list[str], wanted: str | None) -> tuple[str, list[str]]:
    """Input: listed ids and the user's `--model`. Output: `(model, notes)`. Raises
    `EndpointError("no_model")` when nothing is listed and no model was given."""
    if wanted:
        if ids and wanted not in ids:
            return wanted, [f"model {wanted!r} is not listed by /models (listed: {', '.join(ids)})"]
        return wanted, []
    if not ids:
        raise EndpointError("no_model", "/models lists no model; pass --model")
    notes = [f"several models: {', '.join(ids)}; using {ids[0]} — pass --model"] if len(ids) > 1 else []
    return ids[0], notes


async def discover(
    client: Side | httpx.AsyncClient,
    endpoint_base_url: str,
    api_key: SecretStr | str | None = None,
    model: str | None = None,
    max_context: int | None = None,
    timeout: float = 10.0,
) -> EngineInfo:
    """Input: a side client (`side.Side`, or an httpx client), the OpenAI base URL (…/v1),
    optional key, `--model`, `--max-context` and a per-call timeout. Output: `EngineInfo`.
    Raises `EndpointError` when `/models` cannot be used."""
    client = side_of(client)
    base = endpoint_base_url.rstrip("/")
    root = root_of(base)
    headers = auth_headers(api_key)
    payload = await _request_json(client, "GET", base + "/models", headers, timeout)
    try:
        items = model_items(payload)
    except EndpointError as err:
        raise EndpointError("bad_payload", f"{base}/models: {err.message}", url=base + "/models") from None
    ids = model_ids(items)
    chosen, notes = choose_model(ids, model)
    item = next((i for i in items if (i.get("id") or i.get("model")) == chosen), items[0] if items else None)
    engine = engine_of(item)
    ctx, source = (max_context, "--max-context") if max_context is not None else context_of(item)
    props = (await _props(client, root, headers, timeout)
             if ctx is None or engine in ("llamacpp", "workloadlang-sim") else None)
    if ctx is None:
        ctx, source = props_context(props)
        if ctx is None:
            notes.append("could not detect the context length; pass --max-context")
    slots = props.get("total_slots") if props else None
    slots = slots if type(slots) is int and slots > 0 else None
    url, style = await _probe_tokenize(client, root, api_key, timeout, chosen, engine)
    if url is None:
        notes.append("no working /tokenize route; prompt sizes cannot be checked with the engine's tokenizer")
    return EngineInfo(
        model=chosen, models=ids, notes=notes, max_context=ctx, max_context_source=source,
        engine=engine, tokenize_url=url, tokenize_style=style, metrics_url=root + "/metrics",
        slots=slots, prefill_own=prefill_own(props, slots),
    )


async def _props(
    client: Side, root: str, headers: dict[str, str], timeout: float
) -> dict[str, Any] | None:
    """Output: llama.cpp's `/props` document, or None when there is none."""
    try:
        props = await _request_json(client, "GET", root + "/props", headers, timeout)
    except EndpointError:
        return None
    return props if isinstance(props, dict) else None


def prefill_own(props: dict[str, Any] | None, slots: int | None) -> bool:
    """Input: the `/props` document (None when there is none) and its slot count. Output: True
    when the engine's prefill time holds only the request's own work: it runs one request at a
    time (the others wait outside that time), or says so (`"prefill_time": "own"`, which the
    embedded simulator serves: its prefill time is modelled per request). Otherwise False:
    several requests may share its batches, and each one's prefill time holds the others' work."""
    return slots == 1 or bool(props and props.get("prefill_time") == "own")


def props_context(props: dict[str, Any] | None) -> tuple[int | None, str | None]:
    """Output: llama.cpp `/props` `default_generation_settings.n_ctx`, or `(None, None)`."""
    settings = props.get("default_generation_settings") if props else None
    value = settings.get("n_ctx") if isinstance(settings, dict) else None
    if type(value) is int and value > 0:
        return value, "/props default_generation_settings.n_ctx"
    return None, None


async def _probe_tokenize(
    client: Side, root: str, api_key: SecretStr | str | None, timeout: float,
    model: str, engine: EngineName,
) -> tuple[str | None, TokenizeStyle | None]:
    """Output: `(url, style)` of the first /tokenize body shape that counts the probe text as more
    than zero tokens (the engine's likely shape first), or `(None, None)`."""
    url = root + "/tokenize"
    styles: tuple[TokenizeStyle, ...] = ("content", "prompt") if engine == "llamacpp" else ("prompt", "content")
    for style in styles:
        tok = Tokenizer(client, url, style, model=model, api_key=api_key, timeout=timeout)
        try:
            if await tok.count(_PROBE_TEXT) > 0:
                return url, style
        except EndpointError:
            continue
    return None, None
