"""The cache card: what `wl probe` found out about one engine's cache (docs/probe.md, "The
card's schema").

Input: nothing of the runner (like the results contract, this module imports no runner code, so
the report and `wl probe --compare` read cards without importing HTTP). Output: `Card` (the JSON
of `wl probe --output`, schema `workloadlang.card/1`), one `Property` per thing the card
tells, and `read_card`.

Every property is `known` (its `value`, and how sure: `interval`, `basis`), `unknown` (its
`reason`: what the engine did not show), or `not_measured` (its `reason`: the budget, the time
budget, an experiment that could not run). A property never holds a guess.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

SCHEMA = "workloadlang.card/1"

PROPERTIES: tuple[str, ...] = (
    "granularity", "device_capacity", "host_capacity", "restore_speed", "eviction_order",
    "idle_lifetime", "shared_prefix", "abort_retention", "integrity", "slots",
)
"""The card's properties, in the order the card shows them."""

Status = Literal["known", "unknown", "not_measured"]


class Property(BaseModel):
    """One property of the card (see the module). `summary`: one line for the terminal;
    `value`: the property's own fields (docs/probe.md); `interval`: the range the measurements
    allow, where the value is a number; `basis`: how it was measured; `requests`: the records
    it rests on (ids of the experiments' requests); `experiment`: which one measured it."""

    model_config = ConfigDict(extra="forbid")

    status: Status
    summary: str = ""
    value: dict[str, Any] = {}
    interval: list[float] | None = None
    basis: str = ""
    reason: str | None = None
    experiment: str | None = None
    requests: list[str] = []


class Experiment(BaseModel):
    """One run of a probe workload: which (`workload`: `probes/NAME`), with what (`params`,
    `salt`: `wl run probes/NAME --salt S -p ...` repeats it), and what it cost."""

    model_config = ConfigDict(extra="forbid")

    name: str
    workload: str
    salt: str
    params: dict[str, Any] = {}
    requests: int = 0
    prompt_tokens: int = 0
    prefilled_tokens: int = 0
    wall_s: float = 0.0
    exit_code: int = 0
    note: str | None = None


class Cost(BaseModel):
    """What the whole probe sent: requests, prompt tokens, the tokens the engine prefilled
    (reported uncached, the whole prompt where it reported nothing), wall time; next to it what
    a naive bisection of the capacity one context at a time would have prefilled."""

    model_config = ConfigDict(extra="forbid")

    requests: int = 0
    prompt_tokens: int = 0
    prefilled_tokens: int = 0
    wall_s: float = 0.0
    naive_bisection_tokens: int | None = None


class Card(BaseModel):
    """The cache card (see the module): the engine, the options, each property, each
    experiment, what it cost, and the exit code `wl probe` gave."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    schema_: str = Field(SCHEMA, alias="schema")
    engine: dict[str, Any] = {}
    started_at: str = ""
    options: dict[str, Any] = {}
    properties: dict[str, Property] = {}
    experiments: list[Experiment] = []
    cost: Cost = Cost()
    left_out: list[str] = []
    exit_code: int = 0

    def to_json(self) -> str:
        return self.model_dump_json(indent=2, by_alias=True)

    def prop(self, name: str) -> Property:
        """The property `name`, or a `not_measured` one when the card has none."""
        return self.properties.get(name) or Property(status="not_measured",
                                                     reason="not in this card")


class CardFileError(ValueError):
    """A file that is not a readable card; the message is one line saying why."""


def read_card(path: str | Path) -> Card:
    """A card file (`wl probe --output`). Raises `CardFileError` with a one-line reason."""
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        raise CardFileError(f"cannot read {path}: {e.strerror or e}") from None
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise CardFileError(f"{path} is not JSON or was cut short ({e})") from None
    return card_of(data, str(path))


def card_of(data: Any, path: str = "the card") -> Card:
    """`data` (a card's JSON, parsed) as a `Card`, or `CardFileError`."""
    schema = data.get("schema", "") if isinstance(data, dict) else ""
    if not isinstance(schema, str) or not schema.startswith("workloadlang.card/"):
        raise CardFileError(f"{path} is not a workloadlang cache card (schema {schema!r})")
    try:
        return Card.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        raise CardFileError(f"{path} is not a valid cache card ({where}: {first['msg']})") \
            from None
