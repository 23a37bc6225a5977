"""The ```wl examples of a Markdown page, for tests that parse, check (and plan) them.

Input: a Markdown file (docs/language.md by default). Output: `Example`s, each with the block's
text and where it starts, so a failure names the line to fix.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

LANGUAGE_DOC = Path(__file__).resolve().parent.parent / "docs" / "language.md"
_BLOCK = re.compile(r"^```wl[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class Example:
    text: str
    path: Path
    line: int  # 1-based line of the opening ```wl fence

    @property
    def name(self) -> str:
        """A stable id for test parametrisation: `language.md:123`."""
        return f"{self.path.name}:{self.line}"


def wl_examples(path: Path = LANGUAGE_DOC) -> list[Example]:
    """Every ```wl fenced block of `path`, in order."""
    source = path.read_text(encoding="utf-8")
    return [Example(text=m.group(1), path=path, line=source.count("\n", 0, m.start()) + 1)
            for m in _BLOCK.finditer(source)]
