"""Per-request evidence: a planned request plus what the engine did with it.

Input: a `PRequest`, the client's `Outcome`, the outcome of its prefix source, and the TTFT
reference (calibrated threshold, cold prefill speed). Output: a `Record` (`results.Record`, one
JSON line each); `Recorder` makes a run's, with what the run knows besides (who was in flight,
the isolation's waits, the cold prefill speed measured so far).

Every verdict-bearing number says where it came from: `cached_source` (which engine field),
`expected_source` (the engine's own counts for the prefix request, or the plan), `hit_basis`
(`cached` or `ttft`). An errored request is neither a hit nor a miss: its cache evidence is None.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict

from workloadlang import latency
from workloadlang.plan.model import Plan, PRequest
from workloadlang.plan.prefix import GEN_PROMPT_TOKENS
from workloadlang.results import ErrorDetail, Record
from workloadlang.run.contention import Slots
from workloadlang.run.health import percentile
from workloadlang.run.isolation import Isolation
from workloadlang.run.remeasure import Remeasure, drift_of
from workloadlang.run.sse import prefill_time


class TtftReference(BaseModel):
    """What a cold prefill costs here, to cross-check an engine's cache claims by timing."""

    model_config = ConfigDict(frozen=True)
    threshold_s: float | None = None
    threshold_tokens: int | None = None
    cold_prefill_tps: float | None = None
    # what a request costs here besides its prefill, when the speed above is the TTFT's
    # (calibration's few-word prompts): a TTFT holds it, the engine's own prefill time does not
    fixed_s: float = 0.0
    # the least work the engine's own prefill time resolves (calibration's cached twins: an
    # engine that times its own prefill has none of the client's noise); None: not known
    server_floor_s: float | None = None

    def floor(self, server: bool) -> float:
        """Output: the least work a prefill time is taken to resolve: `TIMING_FLOOR_S` for the
        client's TTFT (a busy host's noise), the calibrated `server_floor_s` (when known, and
        at least a microsecond) for the engine's own prefill time."""
        if server and self.server_floor_s is not None:
            return max(1e-6, self.server_floor_s)
        return TIMING_FLOOR_S

    def hit_by_ttft(self, prompt: int | None, ttft: float | None,
                    doubt: float = 0.0) -> bool | None:
        """Hit/miss by the calibrated threshold, only for prompts near the calibrated size; None
        when the TTFT may be up to `doubt` longer than the prefill's own time (`ttft_late_s`,
        `ttft_contended_s`) and that could flip it."""
        threshold, tokens = self.threshold_s, self.threshold_tokens
        if threshold is None or tokens is None or prompt is None or ttft is None:
            return None
        if not 0.75 * tokens <= prompt <= 1.33 * tokens:
            return None
        return _unless_doubt(lambda t: t < threshold, ttft, doubt)


def _unless_doubt(judge: Callable[[float], bool], ttft: float, doubt: float) -> bool | None:
    """Output: `judge(ttft)` when the whole range a TTFT may really have had (`ttft - doubt` to
    `ttft`) judges the same, else None: a verdict is never drawn from a stamp that may be late."""
    verdict = judge(ttft)
    return verdict if doubt <= 0 or judge(max(0.0, ttft - doubt)) == verdict else None


def base_record(req: PRequest) -> dict[str, Any]:
    return dict(id=req.id, seq=req.seq, session=req.session, phase=req.phase, label=req.label,
                index=req.index, kind=req.kind, line=req.span.line,
                planned_prompt_tokens=req.prompt_tokens,
                planned_expected_cached=req.expected_cached,
                planned_lru_cached=req.lru_cached, planned_send_at=req.send_at,
                planned_expected_max=req.expected_cached_max,
                new_tokens=req.new_tokens,
                max_tokens=req.max_tokens, abort_after=req.abort_after,
                prefix_source=req.prefix_source, isolated=req.isolated, lane=req.lane)


def skipped_record(req: PRequest, reason: str) -> Record:
    return Record(**base_record(req), skipped=reason)


def lost_record(req: PRequest, sent_unix: float | None, why: str) -> Record:
    """The record of a request that was sent but whose outcome never came back (its worker was
    lost, `why`): an error of kind `lost`, not a request that was not run."""
    return Record(**base_record(req), t_send_unix=sent_unix, error=ErrorDetail(
        kind="lost", message=f"sent, then {why} before its answer was recorded: its outcome "
        "is unknown"))


def generated(o: Any) -> int:
    """The tokens an answer generated: as the engine counted them, else as streamed."""
    count: int = o.completion_tokens if o.completion_tokens is not None else o.streamed_tokens
    return count


def runtime_expected(req: PRequest, src_req: PRequest | None, src: Any | None,
                     prompt: int | None) -> tuple[int | None, str]:
    """Expected cached tokens in the engine's own counts: the prefix request's reported prompt
    (and its generated tokens when the reply is replayed: also under `replay content` when the
    engine generated no reasoning, the content then being all it generated), else the plan
    scaled to this prompt."""
    if prompt is None:
        return None, "none"
    if src_req is not None and src is not None and src.prompt_tokens is not None and src.error is None:
        covers_prompt = req.expected_cached >= src_req.prompt_tokens - GEN_PROMPT_TOKENS
        if covers_prompt:
            replayed = req.expected_cached > src_req.prompt_tokens or (
                src_req.reply_kept == "content" and not src.reasoning
                and req.expected_cached == src_req.prompt_tokens)
            extra = generated(src) if replayed else 0
            return min(prompt - 1, src.prompt_tokens + extra), f"engine:{req.prefix_source}"
    scaled = round(req.expected_cached * prompt / max(1, req.prompt_tokens))
    return min(max(0, prompt - 1), scaled), "plan"


def speeds(o: Any, uncached: int | None) -> tuple[float | None, float | None]:
    """Prefill tokens/s over the uncached part (None when cached is unknown: never inflate by
    assuming a cold prefill), and decode tokens/s excluding the first token."""
    pp = uncached / o.ttft_s if uncached and o.ttft_s else None
    n = generated(o)
    tg = None
    if n and n >= 2 and o.ttft_s is not None and o.e2e_s and o.e2e_s > o.ttft_s:
        tg = (n - 1) / (o.e2e_s - o.ttft_s)
    return pp, tg


IMPOSSIBLE_PROMPT_FACTOR = 10
"""A prompt count over this many times the planned prompt (plus `IMPOSSIBLE_PROMPT_SLACK`) is
no count of that prompt: the engine's tokenizer sizes the text within tens of percent."""
IMPOSSIBLE_PROMPT_SLACK = 1000


def impossible_counts(req: PRequest, o: Any) -> tuple[Any, str | None]:
    """Input: a planned request and its `Outcome`. Output: the outcome with every count no engine
    can report set to unknown (None) — a negative count, cached tokens above the prompt, a
    prompt of 0 or far beyond the planned one — and why, naming the engine's numbers (None
    when every count is possible). An impossible count is no evidence: with it unknown, the
    request is neither a hit nor a miss."""
    prompt, cached, completion = o.prompt_tokens, o.cached_tokens, o.completion_tokens
    why: list[str] = []
    update: dict[str, Any] = {}
    if prompt is not None and (prompt <= 0 or prompt > IMPOSSIBLE_PROMPT_FACTOR
                               * req.prompt_tokens + IMPOSSIBLE_PROMPT_SLACK):
        why.append(f"prompt_tokens {prompt:,} for a prompt planned at {req.prompt_tokens:,}")
        update.update(prompt_tokens=None, cached_tokens=None, cached_source="none")
    if cached is not None and cached < 0:
        why.append(f"{o.cached_source} is negative ({cached:,})")
    elif cached is not None and prompt is not None and cached > prompt:
        why.append(f"{o.cached_source} {cached:,} > prompt_tokens {prompt:,}")
    if completion is not None and completion < 0:
        why.append(f"completion_tokens is negative ({completion:,})")
        update["completion_tokens"] = None
    if not why:
        return o, None
    update.update(cached_tokens=None, cached_source="none")  # none of its counts is evidence
    return o.model_copy(update=update), "; ".join(why)


def build_record(req: PRequest, o: Any, *, src_req: PRequest | None, src: Any | None,
                 hit_ratio: float, ref: TtftReference, t0: float,
                 planned_at: float | None = None,
                 contended_s: float | None = None,
                 prefill_contended_s: float | None = None,
                 isolation: tuple[bool, float | None, float | None] = (False, None, None)
                 ) -> Record:
    """Everything one request showed, with its verdict-bearing numbers derived. `planned_at`:
    what its schedule lag counts from (default its send time); `contended_s`:
    how long other requests of the run were in flight during its TTFT (`run.contention`);
    `prefill_contended_s`: the same within the engine's own prefill time; `isolation`:
    (timed alone, its wait for the run to drain, how long others' isolation held it)."""
    suspicious = list(getattr(o, "suspicious", []) or [])  # of the numbers as reported
    o, impossible = impossible_counts(req, o)
    if src is not None and src_req is not None:
        src = impossible_counts(src_req, src)[0]
    err = None if o.error is None else ErrorDetail(kind=o.error.kind, message=o.error.message,
                                                   status=getattr(o.error, "status", None))
    rec = dict(base_record(req), prompt_tokens=o.prompt_tokens, cached_tokens=o.cached_tokens,
               cached_source=o.cached_source, completion_tokens=o.completion_tokens,
               streamed_tokens=o.streamed_tokens, server_ttft_ms=o.server_ttft_ms,
               server_prefill_ms=o.server_prefill_ms, finish_reason=o.finish_reason,
               t_start_s=o.t_send - t0, t_send_unix=o.t_send_unix, ttft_s=o.ttft_s,
               schedule_lag_s=None if req.send_at is None else
               o.t_send - t0 - (req.send_at if planned_at is None else planned_at),
               ttft_content_s=o.ttft_content_s, ttft_late_s=o.ttft_late_s,
               ttft_contended_s=contended_s, prefill_contended_s=prefill_contended_s,
               isolated=isolation[0], isolation_wait_s=isolation[1],
               isolation_held_s=isolation[2], e2e_s=o.e2e_s,
               aborted=o.aborted, error=err,
               reply_excerpt=(o.content or o.reasoning or "")[:200],
               suspicious=suspicious, impossible=impossible, **timing(o))
    if err is None:
        rec.update(evidence(req, o, src_req, src, hit_ratio, ref, contended_s,
                            prefill_contended_s))
        if req.isolated:
            rec["priced_at"] = too_few_to_price(rec.get("uncached_tokens"),
                                                rec.get("prefill_source"), ref)
    if impossible:  # no evidence, not even the timing's: the engine's numbers are not sound
        rec.update(hit=None, hit_basis=None)
    rec["expect_ok"] = expectations_met(req, o)
    return Record(**rec)


def timing(o: Any) -> dict[str, Any]:
    """Output: what an outcome's stamps give besides its TTFT (docs/metrics.md): every gap
    between its token events (`itl_s`) and their spread, its time per output token and its
    output tokens per second."""
    n = generated(o)
    itl = getattr(o, "itl_s", None) or None
    return dict(itl_s=None if itl is None else latency.rounded(itl),
                itl=None if itl is None else latency.spread(itl),
                tpot_s=latency.tpot(o.ttft_s, o.e2e_s, n), output_tps=latency.output_tps(n, o.e2e_s))


def evidence(req: PRequest, o: Any, src_req: PRequest | None, src: Any | None, hit_ratio: float,
             ref: TtftReference, contended_s: float | None = None,
             prefill_contended_s: float | None = None) -> dict[str, Any]:
    """Output: the derived fields of an answered request's record. A verdict drawn from a
    prefill time allows that the prefill's own work may have taken less: by the stamp's doubt
    (`ttft_late_s`) and the time other requests were in flight (`contended_s`) when it is the
    client's TTFT; by the time other requests were in flight within it
    (`prefill_contended_s`) when it is the engine's own. It is None when that could change
    it."""
    expected, source = runtime_expected(req, src_req, src, o.prompt_tokens)
    out: dict[str, Any] = {"expected_cached": expected, "expected_source": source}
    cached, prompt = o.cached_tokens, o.prompt_tokens
    uncached = None if cached is None or prompt is None else max(0, prompt - cached)
    out["uncached_tokens"] = uncached
    out["pp_tps"], out["tg_tps"] = speeds(o, uncached)
    if uncached is not None and o.ttft_s is not None:
        out["ttft_per_uncached"] = o.ttft_s / max(1, uncached)
    out["prefill_s"], out["prefill_source"] = prefill_time(o)
    warm = expected is not None and prompt and expected * 2 >= prompt
    if cached is not None and expected and warm:
        # Reuse is a warm request's measure; a cold one is judged by `cold_ok` instead.
        out["reuse"] = min(1.0, cached / expected)
        out["missed"] = max(0, expected - cached)
    doubt = (o.ttft_late_s or 0.0) + (contended_s or 0.0)
    if cached is not None and warm:
        assert prompt is not None and uncached is not None  # warm: a prompt, and cached
        out["hit"], out["hit_basis"] = out["reuse"] >= hit_ratio, "cached"
        own = doubt if out["prefill_source"] == "client_ttft" else (prefill_contended_s or 0.0)
        fixed = ref.fixed_s if out["prefill_source"] == "client_ttft" else 0.0
        server = out["prefill_source"] == "server"
        out["ttft_agrees"] = ttft_agrees(out["hit"], prompt, uncached, out["prefill_s"], ref, own,
                                         fixed, server)
        if out["ttft_agrees"] is None:
            out.update(not_judged(prompt, uncached, out["prefill_s"], ref, server))
    elif cached is None and warm:
        out["hit"] = ref.hit_by_ttft(prompt, o.ttft_s, doubt)
        out["hit_basis"] = None if out["hit"] is None else "ttft"
    return out


TIMING_FLOOR_S = 0.005
"""The least work a timing is taken to resolve on a busy host: a claimed prefill is counted as
at least this long."""
REREAD_UNCACHED = 64
"""What a re-read of a cached context leaves uncached, at most: the few tokens it adds and a
cache block's remainder."""
TIMING_MARGIN = 8
"""A timing tells a hit from a recompute only when a cold prefill of the whole prompt costs at
least this many times the claimed work (so noise cannot flip it)."""


def why_not_judged(prompt: int, uncached: int, prefill: float | None,
                   ref: TtftReference, server: bool = False) -> str:
    """Output: why `ttft_agrees` could not judge a request (the same tests, in its order)."""
    if prefill is None:
        return "no prefill time"
    if not ref.cold_prefill_tps:
        return ("no cold prefill speed (calibration, or a cold request timed alone; over TTFTs, "
                "beyond a faster request timed alone)")
    if prompt < 256:
        return "a prompt under 256 tokens"
    cold, warm = prompt / ref.cold_prefill_tps, uncached / ref.cold_prefill_tps
    if too_small(prompt, uncached, ref, server):
        return (f"a cold prefill of it ({cold * 1000:.3g} ms) would cost under "
                f"{TIMING_MARGIN}x the claimed work ({max(warm, ref.floor(server)) * 1000:.3g} "
                f"ms at least): timing cannot tell at {prompt:,} tokens; it can from "
                f"{decisive_prompt(uncached, ref, server):,}")
    return "a time that may hold other requests' work could go either way"


def not_judged(prompt: int, uncached: int, prefill: float | None, ref: TtftReference,
               server: bool) -> dict[str, Any]:
    """Output: the record's fields saying why `ttft_agrees` was not judged (`ttft_agrees_note`)
    and, when only the prompt's size kept timing from telling, the least that would
    (`decides_at`)."""
    out: dict[str, Any] = {"ttft_agrees_note": why_not_judged(prompt, uncached, prefill, ref,
                                                              server)}
    if prefill is not None and ref.cold_prefill_tps and prompt >= 256 \
            and too_small(prompt, uncached, ref, server):
        out["decides_at"] = decisive_prompt(uncached, ref, server)
    return out


def too_few_to_price(uncached: int | None, source: str | None,
                     ref: TtftReference) -> int | None:
    """Output: for a request timed alone that prefills `uncached` tokens of its own (more than
    a re-read's few) whose prefill time is the client's TTFT, when their cold prefill at the
    reference's speed costs under `TIMING_MARGIN` times what such a timing resolves on a busy
    host (`TIMING_FLOOR_S`): the least uncached tokens whose prefill would stand out of the
    noise, else None. Its time cannot price a token: a price over a few milliseconds of a
    loaded client's TTFT came out twice the engine's, and a finalize that recomputed what it
    said it restored passed (docs/verdicts.md). The engine's own prefill time holds none of
    the client's noise."""
    if (uncached is None or source != "client_ttft" or not ref.cold_prefill_tps
            or uncached <= REREAD_UNCACHED):
        return None
    need = math.ceil(TIMING_MARGIN * TIMING_FLOOR_S * ref.cold_prefill_tps)
    return need if uncached < need else None


def too_small(prompt: int, uncached: int, ref: TtftReference, server: bool = False) -> bool:
    """Output: True when a cold prefill of `prompt` tokens costs under `TIMING_MARGIN` times the
    claimed work (`uncached` tokens, at least `ref.floor(server)`: `server`, the time is the
    engine's own prefill time) at the reference's cold speed (which must be known): timing
    cannot tell a hit from a recompute at this size."""
    speed = ref.cold_prefill_tps or 0.0
    return prompt < TIMING_MARGIN * max(uncached, ref.floor(server) * speed)


def decisive_prompt(uncached: int, ref: TtftReference, server: bool = False) -> int | None:
    """Output: the least prompt (tokens) with `uncached` tokens claimed uncached whose timing
    can tell a hit from a recompute on this engine (`too_small` false; at least 256), None
    without a cold speed. At the calibrated speed: a longer context prefills slower per token,
    so this is never more than needed."""
    if not ref.cold_prefill_tps:
        return None
    return max(256, math.ceil(TIMING_MARGIN * max(uncached, ref.floor(server)
                                                  * ref.cold_prefill_tps)))


def ttft_agrees(hit: bool, prompt: int, uncached: int, ttft: float | None,
                ref: TtftReference, doubt: float = 0.0, fixed: float = 0.0,
                server: bool = False) -> bool | None:
    """Does the timing back the engine's claim? A reported hit whose prefill time is at least
    half of a cold prefill of the whole prompt, beyond `fixed` (what any request costs here
    besides its prefill, when the time is a TTFT), did not come from the cache. None when it
    cannot tell: too little difference (`too_small`), or a TTFT that may be up to `doubt` too
    long could go either way."""
    if ttft is None or not ref.cold_prefill_tps or prompt < 256:
        return None
    cold = prompt / ref.cold_prefill_tps
    warm = uncached / ref.cold_prefill_tps
    if too_small(prompt, uncached, ref, server):
        return None  # too little difference to tell through timing noise
    return _unless_doubt((lambda t: t < fixed + cold / 2) if hit else (lambda t: t >= warm),
                         ttft, doubt)


def expectations_met(req: PRequest, o: Any) -> bool | None:
    if not req.expect:
        return None if o.error else True
    if o.error is not None and not o.aborted:
        return False
    text = f"{o.content}\n{o.reasoning}".lower()
    return all(e.text and e.text.lower() in text for e in req.expect)


class Recorder:
    """The records of one run. Each answered request's record carries how long other requests
    of the run were in flight during its TTFT and within the engine's own prefill time (from
    the concurrency limit's timeline, `Slots.overlap`) and what the run's isolation cost it;
    its timing reference is the calibrated one, or, when calibration gave no cold prefill speed,
    the one measured so far from requests whose prefill time was their own (`ColdSpeed`)."""

    def __init__(self, plan: Plan, slots: Slots, isolation: Isolation, ref: TtftReference,
                 prefill_own: bool,
                 source_of: Callable[[PRequest], str | None] = lambda r: r.prefix_source,
                 again: Remeasure | None = None) -> None:
        self.again = again
        self.by_id, self.hit_ratio, self.source_of = plan.by_id(), plan.hit_ratio, source_of
        self.slo = plan.slo
        self.windows = (plan.warmup_s, plan.cooldown_s, plan.duration_s)
        self.slots, self.isolation, self.ref = slots, isolation, ref
        self.prefill_own = prefill_own  # the engine's prefill time is the request's own work
        self.cold = ColdSpeed()
        self.learnt: tuple[tuple[Any, ...], TtftReference | None] = ((), None)  # (drawn from, reference)
        # of a request with a send time, the time its schedule lag counts from (s from the
        # start): its send time, or the opening of its phase's barrier when that came later
        self.planned_at: dict[str, float] = {}

    def make(self, req: PRequest, o: Any, outcomes: Mapping[str, Any], t0: float) -> Record:
        """Output: the record of `req` answered with `o` (`outcomes`: the run's, for its prefix
        source's counts; `t0`: the run's start). After a `keep` the prefix source is the kept
        branch's end (`source_of`), with the planned shape of branch 0's, which the plan's
        expectation was made with."""
        planned = req.prefix_source
        src = self.source_of(req)
        if src != planned:
            req = req.model_copy(update={"prefix_source": src})
        rec = build_record(req, o, src_req=self.by_id.get(planned) if planned else None,
                           planned_at=self.planned_at.get(req.id, req.send_at),
                           src=outcomes.get(src) if src else None, hit_ratio=self.hit_ratio,
                           ref=self.reference(), t0=t0, contended_s=self.contended(o),
                           prefill_contended_s=self.prefill_contended(o),
                           isolation=(req.isolated, self.isolation.waited.get(req.id),
                                      self.isolation.held.get(req.id)))
        if self.again is not None:
            rec = remeasured(rec, self.again, outcomes)
        rec.window = latency.window_of(rec.t_start_s, *self.windows)  # type: ignore[assignment]
        rec.slo_met = latency.slo_met(rec, self.slo)
        self.cold.see(rec)
        return rec

    def hit(self, req: PRequest, o: Any, outcomes: Mapping[str, Any]) -> bool:
        """Output: True when `req` answered with `o` is a hit, as its record would say
        (`outcomes`: the run's, for its prefix source's counts)."""
        planned, src = req.prefix_source, self.source_of(req)
        if src != planned:
            req = req.model_copy(update={"prefix_source": src})
        found = evidence(req, o, self.by_id.get(planned) if planned else None,
                         outcomes.get(src) if src else None, self.hit_ratio, self.reference())
        return bool(found.get("hit"))

    def contended(self, o: Any) -> float | None:
        """Output: how long, between `o`'s send and its first token, another request of the
        run was in flight; None without a first token."""
        if o.ttft_s is None:
            return None
        return self.slots.overlap(o.t_send, o.t_send + o.ttft_s)

    def prefill_contended(self, o: Any) -> float | None:
        """Output: how long, within the engine's own prefill time of `o` (ending at its first
        token), another request of the run was in flight — an engine running several requests
        at once shares its batches among them, and its prefill time holds that; 0 when the
        engine's prefill time is its own work (`EngineInfo.prefill_own`: one request at a time,
        the others waiting outside it); None without the engine's prefill time."""
        if o.server_prefill_ms is None or o.ttft_s is None:
            return None
        if self.prefill_own:
            return 0.0
        first = o.t_send + o.ttft_s
        return self.slots.overlap(max(o.t_send, first - o.server_prefill_ms / 1000), first)

    def reference(self) -> TtftReference:
        """Output: the timing reference for the next record: the calibrated one, its cold
        prefill speed, when calibration gave none, the one measured so far (`ColdSpeed`), with
        what a request costs besides its prefill when that speed is the TTFT's (made again only
        when what it is drawn from changed: a record is built per answer)."""
        if self.ref.cold_prefill_tps:
            return self.ref
        key = self.cold.key()
        if self.learnt[0] != key:
            speed, fixed = self.cold.speed()
            self.learnt = (key, self.ref if speed is None else self.ref.model_copy(
                update={"cold_prefill_tps": speed, "fixed_s": fixed}))
        assert self.learnt[1] is not None
        return self.learnt[1]


def remeasured(rec: Record, again: Remeasure, outcomes: Mapping[str, Any]) -> Record:
    """Output: `rec` with what measuring it again alone says (`run.remeasure`): its sends and
    why the earlier ones were not kept, and, after the first request of its stretch timed
    alone, how many times slower it decoded than that one (`drift`)."""
    notes, anchor = again.notes.get(rec.id, []), again.anchors.get(rec.id)
    if not notes and anchor is None:
        return rec
    drift = drift_of(outcomes.get(rec.id), outcomes.get(anchor)) if anchor else None
    sends = again.sends.get(rec.id, 1 + len(notes))
    return rec.model_copy(update={"attempts": sends, "remeasured": list(notes),
                                  "drift": None if drift is None else round(drift, 4),
                                  "drift_of": anchor})


class ColdSpeed:
    """The cold prefill speed a run measures when calibration gave none, from its requests
    whose prefill time was their own: no other request of the run was in flight in it
    (`prefill_contended_s` / `ttft_contended_s` 0) and, for a TTFT, a first-token stamp not late
    by more than 5 % of what is timed. A prefill that shared the engine looks slower than a
    cold prefill is, and a recompute would then pass for a hit.

    Over the engine's own prefill time: the median speed of the cold requests (at most 10 %
    cached, at least 256 tokens uncached). Over a TTFT, which also holds what any request costs
    besides its prefill (sending, scheduling, the first decode step; tens of ms on a large
    model): the median over the cold requests of their uncached tokens beyond the fastest
    request's, per second of TTFT beyond it (the slope between two sizes, so that cost cancels
    out: a 300-token request's TTFT can be mostly that cost, and a speed over all of it would
    price a cold prefill several times too dear, so a recompute would pass for a hit). That
    cost is the fastest request's TTFT less its own prefill at that speed, allowed for once.
    The latest `SAMPLES` cold requests count: memory and the median's cost stay bounded."""

    SAMPLES = 1001

    def __init__(self) -> None:
        # speeds over the engine's own prefill time; (uncached, TTFT, late) of cold requests
        self.server: deque[float] = deque(maxlen=self.SAMPLES)
        self.ttft: deque[tuple[int, float, float]] = deque(maxlen=self.SAMPLES)
        self.seen = 0  # cold requests kept, ever
        self.floor: tuple[int, float] | None = None  # (uncached, TTFT) of the fastest request

    def see(self, rec: Any) -> None:
        """Input: a record. Keeps its prefill time if it was its own (see the class)."""
        if rec.error is not None or not rec.prefill_s or rec.uncached_tokens is None:
            return
        server = rec.prefill_source == "server"
        if ((rec.prefill_contended_s if server else rec.ttft_contended_s) or 0.0) > 0:
            return
        cold = rec.cached_tokens is not None and bool(rec.prompt_tokens) and \
            rec.cached_tokens <= 0.1 * rec.prompt_tokens and rec.uncached_tokens >= 256
        if server:
            if cold:
                self.server.append(rec.uncached_tokens / rec.prefill_s)
                self.seen += 1
            return
        late = rec.ttft_late_s or 0.0
        if not late and (self.floor is None or rec.prefill_s < self.floor[1]):
            self.floor = (rec.uncached_tokens, rec.prefill_s)
        if cold:
            self.ttft.append((rec.uncached_tokens, rec.prefill_s, late))
            self.seen += 1

    def key(self) -> tuple[Any, ...]:
        """Output: what the speed is drawn from, to tell when it must be made again."""
        return self.seen, self.floor

    def speed(self) -> tuple[float | None, float]:
        """Output: (the cold prefill speed in uncached tokens per second or None, what a request
        costs besides its prefill when that speed is over TTFTs, else 0)."""
        if self.server:
            return percentile(list(self.server), 0.5), 0.0
        if self.floor is None:
            return None, 0.0
        base, fastest = self.floor
        speeds = [(n - base) / (t - fastest) for n, t, late in self.ttft
                  if n - base >= 256 and t > fastest and late <= 0.05 * (t - fastest)]
        speed = percentile(speeds, 0.5)
        if speed is None:
            return None, 0.0
        return speed, max(0.0, fastest - base / speed)
