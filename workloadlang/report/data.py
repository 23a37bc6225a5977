"""What each chart needs, pulled out of one run's records (no plotting here).

Input: the `Record`s of one results file (plus its calibration, params, verdicts and gates).
Output: small dataclasses, one per chart kind, or None when the records hold nothing for it.

Each chart is chosen from the shape of the records, never from the workload's name:

- retention: records of kind `resend` (a verify pass re-sending earlier contexts);
- sessions over time: records of two or more sessions with a start time;
- speed vs context: a label whose requests extend a request of the same label (a conversation
  grown turn by turn); each chain of them is one run, its `index` the level;
- abort: records planned with `abort_after`, each with the request that re-uses its prefix;
- needles: records whose reply was checked (a gate or report line reads `ok{label}`, or a
  completed request has `expect_ok` False);
- cache theory: records with the plan's LRU figure (a run with `--cache-tokens`) or a planned
  send time (a trace replay), answered with a cached count;
- latency: any answered request with a first token (the distributions of TTFT, ITL, TPOT and
  end-to-end latency over the measured requests, and the requests in flight over time).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from workloadlang.results import Record, Results
from workloadlang.resultsmodels import CacheTheory, Calibration, ParamValue


def usable(records: Iterable[Any]) -> list[Any]:
    """Records that were sent (skipped ones dropped), in schedule order."""
    return sorted((r for r in records if not r.skipped), key=lambda r: r.seq)


def natural_key(text: str) -> list[Any]:
    """`main#10` after `main#9`: digits compare as numbers."""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text)]


# ---------------------------------------------------------------- retention


@dataclass
class Retention:
    """The verify pass: one entry per re-sent context, in verify order (1-based `order`)."""

    ids: list[str]
    order: list[int]
    ttft: list[float | None]
    cached_frac: list[float | None]
    hit: list[bool | None]
    prompt: list[int]
    threshold_s: float | None
    kv_size: int | None
    first_miss: int | None  # verify position of the first miss
    retained_tokens: int  # prompt tokens of the hits before the first miss
    kv_reached_at: int | None  # verify position where the re-sent tokens reach the KV size


def retention(records: Sequence[Record], calibration: Calibration,
              params: Mapping[str, ParamValue]) -> Retention | None:
    """Input: one run's records, its calibration and params. Output: `Retention` built from the
    `resend` records, or None when there are none."""
    rs = [r for r in usable(records) if r.kind == "resend"]
    if not rs:
        return None
    prompt = [r.prompt_tokens or r.planned_prompt_tokens for r in rs]
    frac = [None if r.cached_tokens is None or not r.prompt_tokens
            else r.cached_tokens / r.prompt_tokens for r in rs]
    hits = [r.hit for r in rs]
    first_miss = next((i + 1 for i, h in enumerate(hits) if h is False), None)
    upto = len(rs) if first_miss is None else first_miss - 1
    retained = sum(p for p, h in zip(prompt[:upto], hits[:upto]) if h)
    kv = params.get("kv_size")
    kv = int(kv) if isinstance(kv, (int, float)) and kv > 0 else None
    return Retention(ids=[r.id for r in rs], order=list(range(1, len(rs) + 1)),
                     ttft=[r.ttft_s for r in rs], cached_frac=frac, hit=hits, prompt=prompt,
                     threshold_s=calibration.threshold_s, kv_size=kv,
                     first_miss=first_miss, retained_tokens=retained,
                     kv_reached_at=reached_at(prompt, kv))


def reached_at(sizes: Sequence[int], total: int | None) -> int | None:
    """The 1-based position where the running sum of `sizes` first reaches `total`."""
    if not total:
        return None
    acc = 0
    for i, n in enumerate(sizes):
        acc += n
        if acc >= total:
            return i + 1
    return None


# ---------------------------------------------------------------- sessions over time


@dataclass
class Lanes:
    """One lane per session; marks as parallel columns (fast to plot at 10,000 requests)."""

    sessions: list[str]
    verdicts: list[str]
    labels: list[str]  # distinct labels, in first-seen order
    lane: list[int] = field(default_factory=list)
    t: list[float] = field(default_factory=list)
    e2e: list[float] = field(default_factory=list)
    label: list[str] = field(default_factory=list)
    reuse: list[float | None] = field(default_factory=list)  # None: not judged (cold)
    ttft: list[float | None] = field(default_factory=list)
    failed: list[bool] = field(default_factory=list)  # errored or aborted


def lanes(records: Sequence[Any], verdicts: dict[str, str]) -> Lanes | None:
    """Input: one run's records and its per-session verdicts. Output: `Lanes`, or None unless
    two or more sessions have requests with a start time."""
    rs = [r for r in usable(records) if r.t_start_s is not None]
    sessions = sorted({r.session for r in rs}, key=natural_key)
    if len(sessions) < 2:
        return None
    pos = {s: i for i, s in enumerate(sessions)}
    out = Lanes(sessions=sessions, verdicts=[verdicts.get(s, "") for s in sessions],
                labels=list(dict.fromkeys(r.label for r in rs)))
    for r in rs:
        out.lane.append(pos[r.session])
        out.t.append(r.t_start_s)
        out.e2e.append(r.e2e_s or 0.0)
        out.label.append(r.label)
        out.reuse.append(r.reuse if r.hit is not None else None)
        out.ttft.append(r.ttft_s)
        out.failed.append(r.error is not None or r.aborted)
    return out


# ---------------------------------------------------------------- speed vs context


@dataclass
class SpeedPoint:
    level: int
    context: int
    pp: float | None
    tg: float | None


@dataclass
class Speed:
    """Runs of the grown label: each a list of points by level, plus the mean per level."""

    label: str
    runs: list[list[SpeedPoint]]

    def mean(self) -> list[SpeedPoint]:
        """Input: the runs. Output: one point per level: mean context, mean pp and tg over the
        runs that measured them."""
        by: dict[int, list[SpeedPoint]] = defaultdict(list)
        for run in self.runs:
            for p in run:
                by[p.level].append(p)
        return [SpeedPoint(level=k, context=round(avg([p.context for p in ps]) or 0),
                           pp=avg([p.pp for p in ps]), tg=avg([p.tg for p in ps]))
                for k, ps in sorted(by.items())]


def avg(xs: Iterable[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return sum(vals) / len(vals) if vals else None


def extends(child: Any, parent: Any | None) -> bool:
    """Does `child` continue `parent`'s conversation: same label, a longer prompt that expects
    (nearly) all of the parent's prompt from the cache? Cold siblings that share only a
    system prompt do not."""
    return (parent is not None and parent.label == child.label
            and child.planned_prompt_tokens > parent.planned_prompt_tokens
            and child.planned_expected_cached >= 0.9 * parent.planned_prompt_tokens)


def grown_label(records: Sequence[Any]) -> str | None:
    """The label whose requests most often extend a request of the same label (>= 2 links)."""
    by_id = {r.id: r for r in records}
    links = Counter(r.label for r in records if extends(r, by_id.get(r.prefix_source)))
    if not links:
        return None
    label, n = links.most_common(1)[0]
    return label if n >= 2 else None


def speed(records: Sequence[Any]) -> Speed | None:
    """Input: one run's records. Output: `Speed` over the chains of the grown label (one chain
    per run or session), or None when no label grows or nothing reported a speed."""
    rs = usable(records)
    label = grown_label(rs)
    if label is None:
        return None
    by_id = {r.id: r for r in rs}
    mine = [r for r in rs if r.label == label]
    linked = {r.id for r in mine if extends(r, by_id.get(r.prefix_source))}
    children: dict[str, list[Any]] = defaultdict(list)
    for r in mine:
        if r.id in linked:
            children[r.prefix_source].append(r)
    runs = []
    for root in (r for r in mine if r.id not in linked):
        chain, node = [], root
        while node is not None:
            chain.append(SpeedPoint(level=node.index,
                                    context=node.prompt_tokens or node.planned_prompt_tokens,
                                    pp=node.pp_tps, tg=node.tg_tps))
            kids = children.get(node.id)
            node = kids[0] if kids else None
        runs.append(chain)
    if not any(p.pp is not None or p.tg is not None for run in runs for p in run):
        return None
    return Speed(label=label, runs=runs)


# ---------------------------------------------------------------- abort


@dataclass
class AbortRun:
    run: int
    prime_id: str
    reprompt_id: str
    aborted: bool
    prime_prompt: int | None
    streamed: int
    cached: int | None
    expected: int | None
    reuse: float | None
    hit: bool | None
    estimated: bool = False  # prime_prompt estimated: the engine reported no usage


def prime_prompt(prime: Any, nxt: Any) -> tuple[int | None, bool]:
    """The aborted request's prompt in the engine's tokens: as reported, else (an aborted
    stream often ends before its usage) the re-prompt's reported prompt less the planned
    growth between the two. Output: (tokens or None, estimated?)."""
    if prime.prompt_tokens is not None:
        return prime.prompt_tokens, False
    if nxt.prompt_tokens is None:
        return None, False
    growth = nxt.planned_prompt_tokens - prime.planned_prompt_tokens
    return max(0, nxt.prompt_tokens - growth), True


@dataclass
class Abort:
    runs: list[AbortRun]
    threshold: float | None  # the reuse gate's threshold, when a gate reads reuse


def abort(records: Sequence[Any], reuse_threshold: float | None) -> Abort | None:
    """Input: one run's records and the reuse gate's threshold (or None). Output: `Abort`, one
    entry per request planned with `abort_after` that a later request re-uses, or None."""
    rs = usable(records)
    reuser: dict[str, Any] = {}
    for r in rs:
        if r.prefix_source and r.prefix_source not in reuser:
            reuser[r.prefix_source] = r
    runs: list[AbortRun] = []
    for prime in (r for r in rs if r.abort_after is not None):
        nxt = reuser.get(prime.id)
        if nxt is None:
            continue
        prompt, estimated = prime_prompt(prime, nxt)
        runs.append(AbortRun(run=len(runs) + 1, prime_id=prime.id, reprompt_id=nxt.id,
                             aborted=prime.aborted, prime_prompt=prompt, estimated=estimated,
                             streamed=prime.streamed_tokens, cached=nxt.cached_tokens,
                             expected=nxt.expected_cached, reuse=nxt.reuse, hit=nxt.hit))
    return Abort(runs=runs, threshold=reuse_threshold) if runs else None


# ---------------------------------------------------------------- needles


@dataclass
class NeedleRow:
    id: str
    length: int
    found: bool | None  # None: errored, neither found nor missed
    reply: str
    error: str


@dataclass
class Needles:
    rows: list[NeedleRow]
    depth: float | None


OK_REF = re.compile(r"\bok\{([^}]*)\}")


def checked_labels(lines: Iterable[str]) -> set[str]:
    """Labels read by `ok{...}` in the given `.wl` lines (`ok{needle}` -> {"needle"})."""
    out: set[str] = set()
    for line in lines:
        for sel in OK_REF.findall(line):
            out.update(p.strip() for p in sel.split(",") if re.fullmatch(r"\s*\w+\s*", p))
    return out


def needles(records: Sequence[Any], checked: set[str], depth: Any = None) -> Needles | None:
    """Input: one run's records, the labels whose replies a gate checks, and the needle depth
    (a param, when there is one). Output: `Needles` (found / not per prompt length), or None.
    A label also counts as checked when one of its completed requests failed its check."""
    rs = usable(records)
    failed = {r.label for r in rs if r.expect_ok is False and r.error is None}
    labels = (checked | failed) & {r.label for r in rs}
    if not labels:
        return None
    rows = []
    for r in rs:
        if r.label not in labels:
            continue
        found = None if r.error is not None and not r.aborted else bool(r.expect_ok)
        rows.append(NeedleRow(id=r.id, length=r.prompt_tokens or r.planned_prompt_tokens,
                              found=found, reply=r.reply_excerpt or "",
                              error=r.error.message if r.error is not None else ""))
    return Needles(rows=rows, depth=depth if isinstance(depth, (int, float)) else None)


# ---------------------------------------------------------------- cache theory


@dataclass
class Theory:
    """Cumulative token-weighted hit rates after each answered request, in send order:
    measured (cached / prompt tokens as the engine counted them), a perfect cache's range
    (`unlimited`: certain, `unlimited_max`: possible when concurrent requests finish first;
    None when the plan has no `exp. max`) and the LRU cache's (the plan's, over its planned
    prompt tokens; None without `--cache-tokens`)."""

    measured: list[float]
    unlimited: list[float]
    lru: list[float] | None
    cache: str | None  # e.g. "LRU 2,000,000 tokens / 512"
    concurrency: int
    unlimited_max: list[float] | None = None


def theory(records: Sequence[Record], summary: CacheTheory | None) -> Theory | None:
    """Input: one run's records and its `cache_theory`. Output: `Theory`, or None when the run
    had no cache model, replayed no trace, planned no send time and no `exp. max` (nothing but
    what is certain to compare with), or nothing was answered with a cached count."""
    from workloadlang.theory import measured as answered
    from workloadlang.theory import possible

    if not (summary is not None and summary.traced) and not any(
            r.planned_lru_cached is not None or r.planned_send_at is not None
            or r.planned_expected_max is not None for r in records):
        return None
    rs = sorted((r for r in records if answered(r)), key=lambda r: (r.t_start_s or 0, r.seq))
    if not rs:
        return None
    has_lru = all(r.planned_lru_cached is not None for r in rs)
    has_max = any(r.planned_expected_max is not None for r in rs)
    sums = [0, 0, 0, 0, 0, 0]  # prompt, cached, planned prompt, expected, lru, possible
    out: tuple[list[float], ...] = ([], [], [], [])
    for r in rs:
        for i, v in enumerate((r.prompt_tokens or 0, r.cached_tokens or 0, r.planned_prompt_tokens,
                               r.planned_expected_cached, r.planned_lru_cached or 0,
                               possible(r))):
            sums[i] += v
        out[0].append(sums[1] / sums[0] if sums[0] else 0.0)
        for k, i in ((1, 3), (2, 4), (3, 5)):
            out[k].append(sums[i] / sums[2] if sums[2] else 0.0)
    summary = summary or CacheTheory()
    cache = (f"LRU {summary.cache_tokens:,} tokens / {summary.cache_block or 0:,}"
             if has_lru and summary.cache_tokens else "LRU" if has_lru else None)
    return Theory(measured=out[0], unlimited=out[1], lru=out[2] if has_lru else None,
                  cache=cache, unlimited_max=out[3] if has_max else None,
                  concurrency=summary.overlap or 1)


# ---------------------------------------------------------------- latency


CDF_POINTS = 400  # points a distribution is drawn with at most (its quantiles)


@dataclass
class Latency:
    """The measured requests' latency distributions (sorted seconds, at most `CDF_POINTS`
    quantiles each; an empty list: none) and the requests in flight over time (`series`:
    (seconds from the start, requests), from the results' `performance`)."""

    dists: dict[str, list[float]]
    series: list[tuple[float, int]]


def thinned(xs: list[float], n: int = CDF_POINTS) -> list[float]:
    """Input: sorted values. Output: at most `n` of them, evenly spaced by rank, the least
    and the largest kept."""
    if len(xs) <= n:
        return xs
    return [xs[round(k * (len(xs) - 1) / (n - 1))] for k in range(n)]


def latency(res: Results) -> Latency | None:
    """Input: one run's results. Output: `Latency`, None when no measured request was answered
    with a first token."""
    from workloadlang.latency import measured

    ok = [r for r in measured(res.records) if r.error is None and r.ttft_s is not None]
    if not ok:
        return None
    dists: dict[str, list[float]] = {
             "TTFT": [r.ttft_s for r in ok if r.ttft_s is not None],
             "ITL": [g for r in ok for g in (r.itl_s or ())],
             "TPOT": [r.tpot_s for r in ok if r.tpot_s is not None],
             "E2E": [r.e2e_s for r in ok if r.e2e_s is not None]}
    perf = res.performance
    series = list(perf.concurrency.series) if perf is not None and perf.concurrency else []
    return Latency({k: thinned(sorted(v)) for k, v in dists.items()}, series)
