"""The checks of the message parts that take text from elsewhere, a part of the checker
(`workloadlang.check`).

Input: the workload's datasets (`dataset NAME = PATH`) and each message part that takes an
earlier request's answer (`reply NAME[INDEX]`) or a dataset's text (`prompt NAME`, `answer
NAME`, `filler N from NAME`), of the checker's workload (`PartChecks`, given the
`checkexpr.Checker`). Output: the checker's diagnostics: an unknown request (WL207) or dataset
(WL251), an answer in a named text (WL250), a duplicate dataset (WL202), a value of the wrong
kind (WL301, WL302) or out of bounds (WL305).
"""

from __future__ import annotations

from workloadlang import ir
from workloadlang.checkexpr import Checker
from workloadlang.diagnostics import did_you_mean
from workloadlang.kinds import Scope


class PartChecks:
    """The checks of parts that take text from elsewhere (see the module), adding to the
    diagnostics of `checker`."""

    def __init__(self, checker: Checker) -> None:
        self.c = checker

    def check_reply_part(self, part: ir.ReplyPart, scope: Scope, role: str | None) -> None:
        """`reply NAME[INDEX]`: a named request (WL207), in a message (WL250: a named text is
        the same for the whole run, an answer is not)."""
        if part.name not in self.c.names.requests:
            self.c.err("WL207", f"no request is named `{part.name}`", part.span,
                     did_you_mean(part.name, self.c.names.requests) or
                     f"name a request with `as {part.name}` on a `reply`")
        if role is None:
            self.c.err("WL250", "`reply` in a named text", part.span, "a named text is the same "
                     "for the whole run; put the answer in the message that sends it")
        self.c.value(part.index, scope, "number", "the index of `reply`", "index")

    def check_data_part(self, part: ir.DataPart, scope: Scope) -> None:
        """A dataset's text: a declared dataset (WL251), an index, a filler's size."""
        names = [d.name for d in self.c.wl.datasets]
        if part.dataset not in names:
            self.c.err("WL251", f"no dataset is named `{part.dataset}`", part.span,
                     did_you_mean(part.dataset, names) or
                     f"declare it at the workload's top: `dataset {part.dataset} = \"FILE\"`")
        self.c.value(part.index, scope, "number", f"the item of `{part.what}`", "index")
        self.c.value(part.tokens, scope, "number", "the size of `filler`", "filler")

    def check_datasets(self) -> None:
        """`dataset NAME = PATH`: unique names, a string path of params."""
        self.c.unique(self.c.wl.datasets, "dataset")
        for d in self.c.wl.datasets:
            self.c.value(d.path, self.c.top, "string", "the path of a dataset", None)
