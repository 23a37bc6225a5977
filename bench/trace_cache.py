"""What a prefix cache should serve the Mooncake traces: the planner's unlimited-cache hit rate
of each trace and its LRU hit rates at 3M, 10M and 50M tokens (docs/traces.md).

For each trace file it plans the bundled `mooncake` workload at concurrency 1 (every request
after the one before: the order the figures assume) once per cache size, and prints the
token-weighted hit rates: `expected_cached_tokens` and `lru_cached_tokens` over the prompt
tokens. It also prints the same trace counted without the planner, straight from the block ids
(a prompt's leading ids seen before, in tokens, over the input tokens), and that count with
every output token added as a hit (the reading of the paper's figures in docs/traces.md).

Usage: python -m bench.trace_cache [--traces FILE,...] [--block 512] [--sizes 3M,10M,50M]
                                   [--json PATH]
(default traces: conversation and synthetic in ../shared/data/traces/mooncake)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from bench.harness import ROOT, add_json_argument, describe_machine, machine, write_json
from workloadlang import api
from workloadlang.cli.arguments import token_count
from workloadlang.plan.model import CacheModel

PAPER = {"conversation": 40, "synthetic": 66}  # the paper's cache ratios, %
SHARED = ROOT.parent / "shared" / "data" / "traces" / "mooncake"


def plan_rates(path: Path, sizes: list[int], block: int) -> tuple[float, list[float], float]:
    """(unlimited hit rate, LRU hit rate per size, seconds per plan)."""
    source = api.load("mooncake")
    wl = api.parse_checked(source)
    out, unlimited, spent = [], 0.0, 0.0
    for size in sizes:
        t0 = time.perf_counter()
        plan = api.make_plan(wl, source, {"trace": str(path), "max_concurrency": "1"},
                             salt="bench", cache=CacheModel(tokens=size, block=block))
        spent += time.perf_counter() - t0
        t = plan.totals
        unlimited = t.expected_cached_tokens / t.prompt_tokens
        out.append(t.lru_cached_tokens / t.prompt_tokens)
    return unlimited, out, spent / len(sizes)


def counted(path: Path) -> tuple[float, float]:
    """(input tokens of leading block ids seen before / input tokens, the same with every
    output token counted as a hit), from the file alone."""
    seen: set = set()
    hit = total = output = 0
    for line in path.read_text().splitlines():
        r = json.loads(line)
        ids, n = r["hash_ids"], r["input_length"]
        k = 0
        while k < len(ids) and ids[k] in seen:
            k += 1
        hit += n if k == len(ids) else 512 * k
        total += n
        output += r["output_length"]
        seen.update(ids)
    return hit / total, (hit + output) / total


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", default=",".join(str(SHARED / f"{n}_trace.jsonl")
                                                 for n in PAPER))
    ap.add_argument("--block", type=int, default=512)
    ap.add_argument("--sizes", default="3M,10M,50M")
    add_json_argument(ap)
    args = ap.parse_args(argv)
    started = machine()
    sizes = [token_count(s) for s in args.sizes.split(",")]
    head = " | ".join(f"LRU {s / 1e6:g}M" for s in sizes)
    print(f"{describe_machine(started)} · blocks of {args.block} tokens\n")
    print(f"| trace | requests | paper | unlimited | {head} | from the ids | + outputs |")
    print("|---|---:|---:|---:|" + "---:|" * len(sizes) + "---:|---:|")
    rows = []
    for name in args.traces.split(","):
        path = Path(name)
        if not path.is_file():
            print(f"{path}: missing", file=sys.stderr)
            return 2
        unlimited, lru, per_plan = plan_rates(path, sizes, args.block)
        ids, with_out = counted(path)
        n = sum(1 for _ in path.open())
        short = path.name.split("_")[0]
        paper = PAPER.get(short)
        cells = " | ".join(f"{100 * x:.1f} %" for x in lru)
        print(f"| {short} | {n:,} | {'-' if paper is None else f'{paper} %'} | "
              f"{100 * unlimited:.1f} % | {cells} | {100 * ids:.1f} % | {100 * with_out:.1f} % |")
        rows.append({"trace": path.name, "requests": n, "paper": paper, "unlimited": unlimited,
                     "lru": dict(zip(map(str, sizes), lru)), "from_ids": ids,
                     "with_outputs": with_out, "seconds_per_plan": per_plan})
    print("\n" + "; ".join(f"{r['trace']}: {r['seconds_per_plan']:.1f} s per plan"
                           for r in rows))
    write_json(args.json, "trace_cache", args, rows, started, block=args.block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
