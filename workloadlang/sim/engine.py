"""The simulated engine: request admission, slots, prefix-cache bookkeeping, the time model and
token generation, with faults applied per request.

Input: a parsed chat-completions body plus the `X-WL-Session` / `X-WL-Request` headers.
Output: a `Job` whose `Simulator.run` async generator yields batches of
("reasoning" | "content", word) pairs paced by the time model; the job then carries usage and server-side timings.

Lifecycle: prepare (validate, render, plan) -> queue for a slot -> match the prefix cache (pin)
-> prefill (sleep) -> insert the prompt's full blocks (pinned) -> decode -> finalize (insert the
generated blocks, unpin). A cancellation in the queue caches nothing new; one in prefill caches
nothing new either, or (`prefill_abort="keep"`) the blocks prefilled before it; a cancellation
while decoding is an abort: prompt + generated-so-far stay cached (unpinned), or as
`decode_abort` says (the prompt only, or nothing).
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
import zlib
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from time import perf_counter
from typing import Any

from .cache import PrefixCache
from .config import FaultSpec, SimConfig
from .emissions import EmissionLog
from .replies import ReplyPlan, plan_reply
from .timing import SlotPool, decode_seconds, prefill_seconds, restore_seconds
from .tokenizer import ROOT_HASH, THINK, THINK_END, MessageError, Rendered, Renderer, chain_hashes

DEFAULT_MAX_TOKENS = 256
_MIN_SLEEP = 0.0005  # seconds: a token due sooner than this is emitted without sleeping
_MAX_BATCH = 64  # tokens emitted before yielding to the event loop


class ApiError(Exception):
    """An OpenAI-style error response: HTTP status plus `{"error": {...}}` body."""

    def __init__(self, status: int, message: str, kind: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.param = status, message, kind, param

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param,
                          "code": self.status}}


ANSWERED_KEPT = 64  # the requests last answered that `state` names


@dataclass
class SimCounters:
    """Monotonic request and token counters (exported on /metrics and /sim/state)."""

    requests: int = 0
    completed: int = 0
    aborted: int = 0
    cancelled: int = 0
    rejected: int = 0
    errors_injected: int = 0
    query_tokens: int = 0
    hit_tokens: int = 0
    computed_tokens: int = 0
    host_restored_tokens: int = 0
    generation_tokens: int = 0
    concurrency_evictions: int = 0


@dataclass
class Job:
    """One chat-completions request from admission to finalization (times: perf_counter s)."""

    id: str
    session: str | None
    request_id: str | None
    arrival: float
    created: int
    stream: bool
    include_usage: bool
    rendered: Rendered
    plan: ReplyPlan
    units: int = 1
    degraded: bool = False
    degraded_host: bool = False
    no_report: bool = False
    omit_zero: bool = False
    no_timings: bool = False
    drop_aborted: bool = False
    slow: float = 1.0  # the slow_prefill factor
    corrupt_at: int | None = None  # corrupt_restored: where a restored reply diverges
    since: int = 0  # the cache's placements when the job matched (its own blocks come after)
    drift: float = 1.0  # the factor of a `drift` fault that names this request (1: none)
    drifting: bool = False  # it opened the `drift` fault's window and is being served (`Drift`)
    state: str = "queued"  # queued | prefill | decode | done | cancelled
    finished: bool = False
    slot_held: bool = False
    pinned: list = field(default_factory=list)
    prompt_complete: bool = False
    cached: int = 0
    restored_tokens: int = 0
    reasoning: list = field(default_factory=list)
    content: list = field(default_factory=list)
    think_closed: bool = False
    finish_reason: str | None = None
    t_enqueued: float = 0.0
    t_slot: float = 0.0
    t_prefill_end: float = 0.0
    prefill_cost: float = 0.0
    t_first_unix: float = 0.0
    t_first: float = 0.0
    t_first_written: float = 0.0  # the first token's bytes handed to the socket (streaming)
    t_last: float = 0.0

    @property
    def n_prompt(self) -> int:
        return self.rendered.n

    @property
    def emitted(self) -> int:
        return len(self.reasoning) + len(self.content)

    def record(self, kind: str, word: str) -> None:
        """Account one generated word (closing the think block at the first content word)."""
        if kind == "reasoning":
            self.reasoning.append(word)
        else:
            if self.reasoning and not self.think_closed:
                self.think_closed = True
            self.content.append(word)
        if not self.t_first:
            self.t_first = perf_counter()
            self.t_first_unix = time.time()

    def generated_tokens(self) -> list:
        """Generated tokens as the next request's template renders them: `<think> r.. </think> c..`."""
        if not self.reasoning:
            return list(self.content)
        return [THINK, *self.reasoning, *([THINK_END] if self.think_closed else []), *self.content]

    # -------------------------------------------------------------- reporting

    def _report_cached(self) -> bool:
        return not self.no_report and not (self.omit_zero and self.cached == 0)

    def usage(self) -> dict:
        """The OpenAI `usage` object (prompt_tokens_details subject to the reporting faults)."""
        out: dict[str, Any] = {
            "prompt_tokens": self.n_prompt,
            "completion_tokens": self.emitted,
            "total_tokens": self.n_prompt + self.emitted,
        }
        if self._report_cached():
            out["prompt_tokens_details"] = {"cached_tokens": self.cached}
        out["completion_tokens_details"] = {"reasoning_tokens": len(self.reasoning)}
        return out

    def timings(self) -> dict | None:
        """llama.cpp-like server-side `timings` plus `queue_ms` and `ttft_ms` (milliseconds);
        None under `no_timings` (an engine that reports none, like vLLM and SGLang)."""
        if self.no_timings:
            return None
        # prompt_ms is the modelled prefill compute (what an engine's GPU would report); the wall
        # time also holds the simulator's own event-loop lag when its process is saturated,
        # which is an artefact of the simulator, not of the engine it models (prompt_wall_ms)
        prompt_ms = self.prefill_cost * 1e3 if self.t_prefill_end else 0.0
        wall_ms = (self.t_prefill_end - self.t_slot) * 1e3 if self.t_prefill_end else 0.0
        end = self.t_last or self.t_prefill_end
        predicted_ms = (end - self.t_prefill_end) * 1e3 if self.t_prefill_end else 0.0
        n_pred = self.emitted
        out: dict[str, Any] = {}
        if not self.no_report:
            prompt_n = self.n_prompt - self.cached
            out["prompt_n"] = prompt_n
            out["prompt_per_second"] = prompt_n / prompt_ms * 1e3 if prompt_ms > 0 else None
            if self._report_cached():
                out["cache_n"] = self.cached
        out["prompt_ms"] = round(prompt_ms, 3)
        out["prompt_wall_ms"] = round(wall_ms, 3)
        out["predicted_n"] = n_pred
        out["predicted_ms"] = round(predicted_ms, 3)
        out["predicted_per_second"] = (
            (n_pred - 1) / predicted_ms * 1e3 if predicted_ms > 0 and n_pred > 1 else None
        )
        out["queue_ms"] = round((self.t_slot - self.t_enqueued) * 1e3, 3) if self.t_slot else 0.0
        out["first_token_unix"] = self.t_first_unix or None
        out["ttft_ms"] = round((self.t_first - self.arrival) * 1e3, 3) if self.t_first else None
        if self.t_first_written:  # server-side time to first byte: arrival -> first token written
            out["ttfb_ms"] = round((self.t_first_written - self.arrival) * 1e3, 3)
        if not self.no_report:
            out["host_restored_n"] = self.restored_tokens
        return out


def _int_field(body: dict, *names: str) -> int | None:
    for name in names:
        value = body.get(name)
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ApiError(400, f"'{name}' must be an integer", "BadRequestError", name)
            return int(value)
    return None


def wants_thinking(body: dict) -> bool:
    """Thinking is on when reasoning_effort is set and not "none", or when
    chat_template_kwargs.thinking / enable_thinking is true."""
    effort = body.get("reasoning_effort")
    if effort is not None and effort != "none":
        return True
    kwargs = body.get("chat_template_kwargs") or {}
    return isinstance(kwargs, dict) and (
        kwargs.get("thinking") is True or kwargs.get("enable_thinking") is True
    )


def _position(fault: FaultSpec | None) -> int | None:
    """A corrupt_restored fault's position (None when none applies)."""
    return None if fault is None or fault.value is None else int(fault.value)


def _factor(fault: FaultSpec | None) -> float:
    """A slow_prefill fault's factor (1.0 when none applies)."""
    return float(fault.value) if fault is not None and fault.value is not None else 1.0


class Drift:
    """The `drift` fault: a machine that runs slower for a while. The first request the fault
    names opens the window: from its arrival, while it is served and for `seconds` after its
    arrival, everything (prefill, restore, the first token, decode) costs the fault's factor
    times as much, for every request served then. One window per server: what a request
    measured again after it sees the machine as it was before. Input: jobs as they arrive and
    end; output: the factor now."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.until = float("-inf")  # the window's end, once opened
        self.opened = False
        self.serving = False  # the request that opened it is being served
        self.k = 1.0  # its factor

    def arrived(self, job: Job) -> None:
        if job.drift != 1.0 and not self.opened:
            self.opened = self.serving = job.drifting = True
            self.k, self.until = job.drift, perf_counter() + self.seconds

    def ended(self, job: Job) -> None:
        if job.drifting:
            job.drifting = self.serving = False

    def factor(self) -> float:
        """Output: how many times slower everything runs now (1.0 outside the window)."""
        return self.k if self.serving or perf_counter() < self.until else 1.0


class Simulator:
    """The engine state shared by all requests of one server (single event loop, no locks)."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.cache = PrefixCache(config.block_size, config.device_tokens, config.host_tokens,
                                 eviction=config.eviction,
                                 tail_first=config.evict_first == "tail",
                                 idle_ttl_s=config.idle_ttl_s)
        self.renderer = Renderer(config.block_size)
        self.slots = SlotPool(config.slots)
        self.counters = SimCounters()
        self.answered: deque[str] = deque(maxlen=ANSWERED_KEPT)  # ids, the last answered last
        self.emissions = EmissionLog(config.emission_log)
        self.active = 0
        self._rng = random.Random(config.seed)
        self._ids = itertools.count(1)
        self.drift = Drift(config.drift_seconds)

    # -------------------------------------------------------------- admission

    def _inject_error(self, session: str | None, request_id: str | None) -> bool:
        fault = self.config.fault("error_rate", session, request_id)
        if fault is None:
            return False
        if request_id:
            key = f"{self.config.seed}:{request_id}".encode()
            draw = zlib.crc32(key) / 2**32
        else:
            draw = self._rng.random()
        return draw < float(fault.value or 0)

    def prepare(self, body: Any, session: str | None, request_id: str | None,
                arrival: float) -> Job:
        """Validate and render a request; raise ApiError (400 / 500) when it must fail."""
        self.counters.requests += 1
        if not isinstance(body, dict):
            raise ApiError(400, "request body must be a JSON object", "BadRequestError")
        if self._inject_error(session, request_id):
            self.counters.errors_injected += 1
            raise ApiError(500, "simulated internal error (error_rate fault)",
                           "InternalServerError")
        try:
            rendered = self.renderer.render(body.get("messages"))
        except MessageError as exc:
            self.counters.rejected += 1
            raise ApiError(400, str(exc), "BadRequestError", "messages") from None
        cfg = self.config
        if rendered.n >= cfg.max_model_len:
            self.counters.rejected += 1
            raise ApiError(
                400,
                f"This model's maximum context length is {cfg.max_model_len} tokens. However, "
                f"your messages resulted in {rendered.n} tokens, leaving no room for generation.",
                "BadRequestError", "messages",
            )
        return self._make_job(body, session, request_id, arrival, rendered)

    def _make_job(self, body: dict, session: str | None, request_id: str | None,
                  arrival: float, rendered: Rendered) -> Job:
        cfg = self.config
        requested = _int_field(body, "n_predict", "max_completion_tokens", "max_tokens")
        if requested is None or requested < 0:
            requested = DEFAULT_MAX_TOKENS
        budget = max(1, min(requested, cfg.max_model_len - rendered.n))
        plan = plan_reply(rendered, budget, wants_thinking(body), cfg.think_tokens, cfg.window,
                          cfg.seed)
        options = body.get("stream_options") or {}

        def on(name: str) -> bool:
            return cfg.fault(name, session, request_id) is not None

        return Job(
            id=f"chatcmpl-sim-{next(self._ids):08x}",
            session=session,
            request_id=request_id,
            arrival=arrival,
            created=int(time.time()),
            stream=bool(body.get("stream")),
            include_usage=isinstance(options, dict) and bool(options.get("include_usage")),
            rendered=rendered,
            plan=plan,
            units=2 if on("duplicate_blocks") else 1,
            degraded=on("degraded"),
            degraded_host=on("degraded_host"),
            no_report=on("no_cached_report"),
            omit_zero=on("omit_cached_when_zero"),
            no_timings=on("no_timings"),
            drop_aborted=on("drop_aborted") or cfg.decode_abort == "drop",
            slow=_factor(cfg.fault("slow_prefill", session, request_id)),
            corrupt_at=_position(cfg.fault("corrupt_restored", session, request_id)),
            drift=_factor(cfg.fault("drift", session, request_id)),
        )

    # -------------------------------------------------------------- lifecycle

    async def run(self, job: Job) -> AsyncIterator[list]:
        """Serve `job`: queue, prefill, decode. Yields lists of (kind, word) pairs (see
        `_decode`); always finalizes, also when cancelled."""
        job.t_enqueued = perf_counter()
        self.drift.arrived(job)
        try:
            await self.slots.acquire()
            job.slot_held = True
            self.active += 1
            job.t_slot = perf_counter()
            job.state = "prefill"
            cost = job.prefill_cost = self._start(job)
            if cost > 0:
                await asyncio.sleep(cost)
            self._prefilled(job)
            async for batch in self._decode(job):
                yield batch
            job.state = "done"
            job.finish_reason = job.plan.finish_reason
        finally:
            self.finalize(job)

    def _start(self, job: Job) -> float:
        """Slot acquired: apply evict_over_concurrency, match the cache, count; return the
        prefill duration in seconds (times the slow_prefill factor)."""
        return self._prefill_cost(job) * job.slow * self.drift.factor()

    def _prefill_cost(self, job: Job) -> float:
        """`_start`'s work: the prefill duration in seconds at the configured speed."""
        cfg, counters = self.config, self.counters
        fault = cfg.fault("evict_over_concurrency", job.session, job.request_id)
        if fault is not None and self.active > int(fault.value or 0):
            self.cache.evict_unpinned()
            counters.concurrency_evictions += 1
        hashes = job.rendered.state.hashes
        job.since = self.cache.placements
        match = self.cache.match(hashes)
        job.pinned = match.pinned
        if match.restored and job.corrupt_at is not None:
            job.plan = replace(job.plan, diverge_at=job.corrupt_at)
        bs, n = cfg.block_size, job.n_prompt
        job.cached = min(match.blocks * bs, (n - 1) // bs * bs)
        job.restored_tokens = match.restored * bs
        counters.query_tokens += n
        counters.hit_tokens += job.cached
        counters.host_restored_tokens += job.restored_tokens
        start = 0 if job.degraded else job.cached
        counters.computed_tokens += n - start
        cost = prefill_seconds(start, n, cfg.prefill_us_per_token, cfg.prefill_ctx_scale)
        if job.degraded:
            return cost
        if job.degraded_host:  # what came back from the host is reported cached, paid as a prefill
            restored_from = max(0, job.cached - job.restored_tokens)
            counters.computed_tokens += job.cached - restored_from
            return cost + prefill_seconds(restored_from, job.cached, cfg.prefill_us_per_token,
                                          cfg.prefill_ctx_scale)
        return cost + restore_seconds(job.restored_tokens, cfg.host_restore_us_per_token)

    def _prefilled(self, job: Job) -> None:
        """Prefill done: insert the prompt's remaining full blocks, pinned."""
        hashes = job.rendered.state.hashes
        rest = hashes[len(job.pinned):]
        inserted = self.cache.insert(rest, job.units) if rest else []
        job.pinned = job.pinned + inserted
        job.prompt_complete = len(inserted) == len(rest)
        job.t_prefill_end = perf_counter()
        job.state = "decode"

    async def _decode(self, job: Job) -> AsyncIterator[list]:
        """Yield the planned words in batches of (kind, word); token i is due at prefill end +
        the decode costs of tokens 1..i. The first token is flushed alone (it is the TTFT);
        later tokens that are already due are batched until the next sleep (max 64), so a
        zero-cost stream is not one socket write per token."""
        cfg = self.config
        # what the first token costs besides the prefill: not in the reported prefill time
        due = job.t_prefill_end + cfg.first_token_us / 1e6 * self.drift.factor()
        if cfg.first_token_us:
            await asyncio.sleep(max(0.0, due - perf_counter()))
        context = job.n_prompt
        batch: list = []
        for kind, word in job.plan.words():
            if job.t_first:
                due += decode_seconds(context, cfg.decode_us_per_token,
                                      cfg.decode_ctx_scale) * self.drift.factor()
                if due - perf_counter() > _MIN_SLEEP or len(batch) >= _MAX_BATCH:
                    if batch:
                        yield batch
                        batch = []
                    delay = due - perf_counter()
                    await asyncio.sleep(delay if delay > _MIN_SLEEP else 0)
            job.record(kind, word)
            context += 1
            batch.append((kind, word))
            if len(job.reasoning) + len(job.content) == 1:
                yield batch
                batch = []
        if batch:
            yield batch
        job.t_last = perf_counter()

    def _generated_hashes(self, job: Job) -> list:
        hashes = job.rendered.state.hashes
        tail = list(job.rendered.state.tail) + job.generated_tokens()
        return chain_hashes(tail, self.config.block_size, hashes[-1] if hashes else ROOT_HASH)

    def finalize(self, job: Job) -> None:
        """Release the slot and settle the cache for `job` (idempotent, synchronous)."""
        if job.finished:
            return
        job.finished = True
        self.drift.ended(job)
        if job.slot_held:
            job.slot_held = False
            self.slots.release()
            self.active -= 1
        if job.state in ("queued", "prefill"):
            self.counters.cancelled += 1
            if job.state == "prefill" and self.config.prefill_abort == "keep":
                self._keep_prefilled(job)
            job.state = "cancelled"
            self.cache.release(job.pinned, job.since)
            job.pinned = []
            return
        aborted = job.state != "done"
        if not job.t_last:
            job.t_last = perf_counter()
        self.counters.generation_tokens += job.emitted
        self.answered.append(job.request_id or job.id)
        if aborted:
            self.counters.aborted += 1
            job.finish_reason = job.finish_reason or "abort"
        else:
            self.counters.completed += 1
        if aborted and job.drop_aborted:
            self.cache.release(job.pinned, job.since)
            job.pinned = []
            self.cache.drop(list(job.rendered.state.hashes) + self._generated_hashes(job))
            return
        keep_generated = not (aborted and self.config.decode_abort == "prompt")
        if job.prompt_complete and keep_generated:
            job.pinned = job.pinned + self.cache.insert(self._generated_hashes(job), job.units)
        self.cache.release(job.pinned, job.since)
        job.pinned = []

    def _keep_prefilled(self, job: Job) -> None:
        """A job cut during its prefill keeps the full blocks prefilled before the cut: the
        share of its uncached positions its prefill's time so far covers (chunked prefill)."""
        cost = job.prefill_cost
        done = 1.0 if cost <= 0 else (perf_counter() - job.t_slot) / cost
        hashes, bs = job.rendered.state.hashes, self.config.block_size
        upto = job.cached + int(min(1.0, max(0.0, done)) * (job.n_prompt - job.cached))
        rest = hashes[len(job.pinned):upto // bs]
        if rest:
            job.pinned = job.pinned + self.cache.insert(rest, job.units)

    # -------------------------------------------------------------- admin

    def state(self) -> dict:
        """A JSON-ready snapshot: cache occupancy, counters, the requests last answered (their
        `x-wl-request` ids, else the simulator's, in the order their answers ended), load and
        config."""
        return {
            "cache": self.cache.snapshot(),
            "counters": vars(self.counters).copy(),
            "answered": list(self.answered),
            "active": self.active,
            "queued": self.slots.waiting,
            "renderer": {"memo_hits": self.renderer.memo_hits,
                         "memo_misses": self.renderer.memo_misses},
            "config": self.config.model_dump(mode="json"),
        }

    def reset(self) -> int:
        """Empty the prefix cache (blocks pinned by active requests stay). Output: removed."""
        return self.cache.clear()
