"""How fast bytes leave: the executor's core decides whether and when a request may go, a pacing
sends it.

Input: the core (`Core`: the clock, the request maker, the outcomes so far, and whether a
session's next request may take over the turn of a request whose answer just ended). Output:
each request's `Outcome`.

Two pacings:
- `InTurn` (here): each request made and sent at its turn, its answer read by its own task,
  records built at once. The https path, debugging, and the baseline tests compare against.
- `WriteAhead` (`workloadlang.run.ahead`): the latency machinery over the wire client's pool:
  requests made ahead, every session's first request written in one go at the start, a
  session's next request written the moment its answer ended, work no send waits for deferred
  to quiet moments.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from workloadlang.plan.model import PRequest
from workloadlang.run.client import send
from workloadlang.run.endpoint import Endpoint
from workloadlang.run.maker import RequestMaker
from workloadlang.run.sse import Outcome
from workloadlang.wire import Transport


class Core(Protocol):
    """What a pacing may ask of the executor's core."""

    clock: Callable[[], float]
    endpoint: Endpoint
    maker: RequestMaker
    concurrency: int

    @property
    def outcomes(self) -> dict[str, Outcome]:
        """The outcomes so far, by request id (the pacing reads them)."""

    def may_take_over(self, req: PRequest) -> bool:
        """True when `req` may be written now, on the turn of the request whose answer just
        ended (nothing waits for a slot, no stop applies, no other session's isolation)."""

    def took_over(self, req: PRequest) -> None:
        """`req` was written on the turn (concurrency slot) of the request before it."""


class Pacing(Protocol):
    """What the core asks of a pacing (see the module)."""

    def bind(self, core: Core) -> None:
        """Called once, before anything else."""

    async def before_clock(self, firsts: list[PRequest]) -> list[PRequest]:
        """Before the run's clock starts, with the first request of each session due at the
        start or at its copy's arrival (`schedule.Copies.early`; a trace request is made while
        it waits for its time): get ready (make them ahead, open connections). Output: those
        it can write in one go at the start (`write_start`), in order."""

    def write_start(self, reqs: list[PRequest], on_written: Callable[[PRequest], None]) -> None:
        """At the start: write `reqs` now, one after the other (`on_written` for each written:
        it holds its turn from then on)."""

    def prepare(self, req: PRequest) -> None:
        """`req` will be sent once something is over that its session waits for anyway (a
        barrier, a planned wait): make it now if it can be made."""

    def ahead(self, req: PRequest) -> None:
        """`req` comes after a request now in flight: make it ahead at a quiet moment."""

    async def send(self, req: PRequest, after: PRequest | None,
                   on_cancel: Callable[[Outcome], None]) -> Outcome:
        """Send `req` (its turn is taken). `after`: the session's next request when it is due
        the moment `req`'s answer ends (None: it is not); a pacing that writes it then on
        `req`'s turn tells the core (`Core.took_over`). `on_cancel`: given what `req` measured
        when the run is stopped while it is in flight."""

    def later(self, work: Callable[[], None]) -> None:
        """Do `work` (no send waits for it) when it costs no send anything; in order."""

    def flush(self) -> None:
        """Do every `later` work now, in order."""

    def written_at(self, req: PRequest) -> tuple[float, float] | None:
        """Output: (send time on the core's clock, wall clock) of a request written ahead whose
        answer nobody read (the run stopped); None when it was not written."""

    def end(self) -> None:
        """The run is over: nothing more is sent or made."""


class InTurn:
    """Each request made and sent at its turn (see the module)."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport

    def bind(self, core: Core) -> None:
        self.core = core

    async def before_clock(self, firsts: list[PRequest]) -> list[PRequest]:
        return []

    def write_start(self, reqs: list[PRequest], on_written: Callable[[PRequest], None]) -> None:
        return None

    def prepare(self, req: PRequest) -> None:
        return None

    def ahead(self, req: PRequest) -> None:
        return None

    async def send(self, req: PRequest, after: PRequest | None,
                   on_cancel: Callable[[Outcome], None]) -> Outcome:
        core = self.core
        chat = core.maker.chat(req, core.outcomes)
        return await send(self.transport, core.endpoint, chat, clock=core.clock,
                          on_cancel=on_cancel)

    def later(self, work: Callable[[], None]) -> None:
        work()

    def flush(self) -> None:
        return None

    def written_at(self, req: PRequest) -> tuple[float, float] | None:
        return None

    def end(self) -> None:
        return None
