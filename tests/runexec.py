"""Running a plan with the executor in a test: against a mock engine (`httpx.MockTransport`,
the in-turn pacing) or a loopback one served by the test's loop (`loopengine`, the wire pool and
the latency pacing: the real path)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from loopengine import LoopEngine
from workloadlang import api
from workloadlang.plan.realise import ExactSizer, Realiser
from workloadlang.results import ListSink
from workloadlang.run.ahead import WriteAhead
from workloadlang.run.endpoint import Endpoint
from workloadlang.run.executor import Executor
from workloadlang.run.pacing import InTurn
from workloadlang.wire import HttpxTransport, Pool

SSE = (b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n'
       b'data: {"choices":[],"usage":{"prompt_tokens":300,"completion_tokens":1}}\n\n'
       b"data: [DONE]\n\n")


def plan_of(text: str, **params: str) -> Any:
    source = api.Source(name="t.wl", text=text)
    return api.make_plan(api.parse_checked(source), source, params, salt="t",
                         env={"max_context": 65536})


async def words(text: str) -> int:
    return len(text.split())  # one token per word: the first guess is exact


def answer(request: httpx.Request | None = None) -> httpx.Response:
    return httpx.Response(200, content=SSE, headers={"content-type": "text/event-stream"})


def execute(plan: Any, chat: Any = answer, *, sink: ListSink | None = None, count: Any = words,
            realiser: Any = Realiser, ahead: bool = True,
            **options: Any) -> tuple[Any, Executor]:
    """Run `plan` against an engine answering with `chat`: over loopback with the latency
    pacing (`ahead`), else over a mock transport in turn; `options` go to the `Executor` (a
    `clock`). Output: (run result, executor)."""
    async def go() -> tuple[Any, Executor]:
        if ahead:
            async with LoopEngine(chat) as engine, Pool() as pool:
                return await run(engine.base_url, WriteAhead(pool))
        async with HttpxTransport(httpx.AsyncClient(transport=httpx.MockTransport(chat))) as t:
            return await run("http://engine/v1", InTurn(t))

    async def run(base_url: str, pacing: Any) -> tuple[Any, Executor]:
        executor = Executor(plan, realiser(plan, ExactSizer(count)), pacing,
                            Endpoint(base_url=base_url, model="m"),
                            sink if sink is not None else ListSink(), **options)
        return await executor.run(), executor

    return asyncio.run(go())
