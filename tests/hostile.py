"""Hostile `.wl` sources, one per class of bad input, at a chosen size; and a measured `wl` run.

`sources(size)` gives a `Case` per class: the bytes, and the WL code `wl check` and `wl plan`
must refuse it with (its first diagnostic), or None for a file that is valid however odd. The
classes: encodings, nesting, numbers, sizes, and what the language's constructs can be made to
ask for: random draws (a gamma of a vanishing spread), texts (that double at each step, a long
chain of them, a long text sent 1,000 times), forks (50,000 branches, forks of forks), sweeps
(1,000 points, points together past the limits), tool calls and traces (a device, a directory).
`size` is the byte size of the cases that scale (a long string, word, comment or token stream):
the tests use about 1 MB, `bench/fuzz.py --hostile` 10 MB. `measured(args)` runs `wl ARGS` in a child process
and returns its exit code, output and peak resident memory (the child's own `ru_maxrss`).

Input: a size in bytes. Output: the cases; for a run, `Measured`.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from workloadlang import bounds

TAIL = 'session s { user "x"; reply 4 } }'


def _workload(body: str, tail: str = TAIL) -> bytes:
    return ("workload w { " + body + " " + tail).encode()


@dataclass(frozen=True)
class Case:
    """A hostile source and what `wl check` and `wl plan` must answer: the WL code of the first
    diagnostic (exit 2), or None (the file is valid, however odd: exit 0)."""

    name: str
    data: bytes
    check: str | None
    plan: str | None = "same"

    @property
    def plan_code(self) -> str | None:
        return self.check if self.plan == "same" else self.plan


def sources(size: int) -> Iterator[Case]:
    """Every class of hostile source, `size` bytes where it scales."""
    yield from _encodings(size)
    yield from _nesting()
    yield from _numbers()
    yield from _sizes(size)
    yield from _draws()
    yield from _texts(size)
    yield from _forks()
    yield from _sweeps()
    yield from _tools(size)
    yield from _traces()


def _encodings(size: int) -> Iterator[Case]:
    rng = random.Random(size)
    text = 'workload w { session s { user "x"; reply 4 } }'
    yield Case("latin-1", text.replace('"x"', '"café"').encode("latin-1"), "WL109")
    yield Case("binary", bytes(rng.randrange(256) for _ in range(min(size, 1 << 16))), "WL109")
    yield Case("utf-16 with a BOM", text.encode("utf-16"), "WL109")
    yield Case("utf-16 without a BOM", text.encode("utf-16-le"), "WL109")
    yield Case("utf-8 BOM", b"\xef\xbb\xbf" + text.encode(), None)
    yield Case("control characters", _workload('doc "\x1b[31m"\x07'), "WL103")


def _nesting() -> Iterator[Case]:
    deep = 400
    yield Case("nested turns", _workload("session s { " + "turn t { " * deep + 'user "x"; reply 4'
                                         + " }" * deep + " }", "}"), "WL108")
    yield Case("nested objects", _workload("options { a = " + "{ a = " * deep + "1" + " }" * deep
                                           + " }"), "WL108")
    yield Case("else-if chain", _workload('session s { if true { user "x" } '
                                          + 'else if true { user "x" } ' * deep + "reply 4 }",
                                          "}"), "WL108")
    yield Case("nested lists", _workload("options { a = " + "[" * deep + "]" * deep + " }"),
               "WL108")
    yield Case("nested brackets", _workload("session s { user filler " + "(" * 10_000 + "1"
                                            + ")" * 10_000 + "; reply 4 }", "}"), None)
    yield Case("minus chain", _workload("session s { user filler " + "-" * 10_000
                                        + "1; reply 4 }", "}"), "WL108")
    yield Case("operator chain", _workload("session s { user filler 1" + "+1" * 20_000
                                           + "; reply 4 }", "}"), "WL108")


def _numbers() -> Iterator[Case]:
    yield Case("400 digits under ceil", _workload("params { n: int = ceil(1" + "0" * 400
                                                  + ") } session s { user filler $n; reply 4 } }",
                                                  ""), "WL111")
    yield Case("100k digits", _workload("params { n: int = 1" + "0" * 100_000 + " }"), "WL111")
    chain = "".join(f"p{i}: int = $p{i - 1} * $p{i - 1}\n" for i in range(1, 2000))
    yield Case("huge-integer param chain", _workload(
        "params { p0: int = 1000\n" + chain + "} session s { user filler $p1999; reply 4 } }",
        ""), None, "WL404")


def _sizes(size: int) -> Iterator[Case]:
    line = bounds.MAX_LINE_CHARS
    yield Case("string literal of almost a line", _workload(
        'session s { user "' + "a" * min(size, line - 100) + '"; reply 4 }', "}"), None)
    yield Case("string literal longer than a line", _workload(
        'session s { user "' + "a" * max(size, line + 1) + '"; reply 4 }', "}"), "WL110")
    yield Case("string of escapes", _workload(
        'session s { user "' + "\\n" * (min(size, line - 100) // 2) + '"; reply 4 }', "}"), None)
    lines = max(1, min(size // line, 10))
    yield Case("lines of escapes", _workload("session s { " + ('user "' + "\\n" * (line // 2 - 20)
                                                               + '"\n') * lines + "reply 4 }",
                                             "}"), None)
    yield Case("unknown refs up to the token limit", _workload(
        "session s { " + "reply $nope\n" * (bounds.MAX_TOKENS // 2 - 20) + "}", "}"), "WL201")
    yield Case("unterminated huge string", _workload('doc "' + "a" * min(size, line - 100) + "\n"),
               "WL104")
    yield Case("huge unknown word", _workload("x" * min(size, line - 100)), "WL101")
    yield Case("huge comment", _workload("# " + "c" * min(size, line - 100) + "\n"), None)
    yield Case("huge whitespace", _workload(" \n" * (min(size, bounds.MAX_FILE_BYTES - 100) // 2)),
               None)
    yield Case("many tokens", _workload("session s { " + 'user "x"; reply 1\n' * (size // 18),
                                        "}"), "WL110")
    yield Case("many braces", _workload("{" * size), "WL110")
    yield Case("over the file size", _workload("#" + " " * bounds.MAX_FILE_BYTES), "WL110")
    params = "".join(f"  w{i}: int = {i}\n" for i in range(min(size // 400,
                                                                 bounds.MAX_TOKENS // 6 - 10)))
    yield Case("many params, under the limits", _workload("params {\n" + params + "}"), None)


def _tiny(exponent: int) -> str:
    """1e-EXPONENT as a product of divisions (no literal is that small)."""
    return "1" + " / 1000000000000000" * (exponent // 15)


def _draws() -> Iterator[Case]:
    for exponent in (165, 155):  # 1 / cv^2 divided by zero; the gamma sampler never ended
        yield Case(f"gamma of cv 1e-{exponent}", _workload(
            f"params {{ cv: float = {_tiny(exponent)} }} session s {{ user \"a\"; reply 4; "
            "wait gamma(2s, $cv); user filler lognormal(100, $cv); reply 4 } }", ""), None)
    yield Case("lognormal of cv 1e15", _workload(
        "params { cv: float = 1000000000000000 } session s { user filler lognormal(100, $cv); "
        "reply 4 } }", ""), None, "WL404")


def _texts(size: int) -> Iterator[Case]:
    doubling = "".join(f"text t{i} = $t{i - 1}, $t{i - 1}\n" for i in range(1, 30))
    yield Case("texts doubling 29 times", _workload(
        f'text t0 = "abcdefghij"\n{doubling}session s {{ user $t29; reply 4 }} }}', ""),
        None, "WL408")
    chain = "".join(f"text t{i} = $t{i - 1}\n" for i in range(1, 8000))
    yield Case("a chain of 8,000 texts", _workload(
        f'text t0 = "end"\n{chain}session s {{ user $t7999; reply 4 }} }}', ""), None)
    strings = "".join(f"p{i}: string = $p{i - 1} + $p{i - 1}\n" for i in range(1, 41))
    yield Case("a string doubling 40 times", _workload(
        f'params {{ p0: string = "ab"\n{strings}}} session s {{ user $p40; reply 4 }} }}', ""),
        None, "WL404")
    big = "x" * min(size, bounds.MAX_LINE_CHARS - 100)
    yield Case("a long literal sent 1,000 times", _workload(
        f'text big = "{big}"\nsession s repeat 1000 {{ user $big; reply 1 }} }}', ""), None)


def _forks() -> Iterator[Case]:
    yield Case("a fork of 50,000 branches", _workload(
        "params { n: int = 50000 } session s { user \"go\"; "
        "spawn $n fork parallel { reply 1 } } }", ""), None)
    yield Case("a fork of 60,000 branches", _workload(
        "session s { user \"go\"; spawn 60000 fork parallel { reply 1 } } }", ""), None,
        "WL408")
    yield Case("forks of forks", _workload(
        "session s { user \"go\"; spawn 300 fork parallel { user \"b\"; "
        "spawn 300 fork parallel keep longest { reply 1 } } } }", ""), None, "WL408")


def _sweeps() -> Iterator[Case]:
    values = ", ".join(str(v) for v in range(1, 1001))
    yield Case("a sweep of 1,000 points", _workload(
        f"params {{ n: int = 1 in 1..100000 sweep [{values}] }} "
        "session s repeat $n { user \"hi\"; reply 1 } }", ""), "WL233")
    yield Case("sweep points over the limit", _workload(
        "params { n: int = 1 sweep [25000, 25001] } "
        "session s repeat $n { user \"hi\"; reply 1 } }", ""), None, "WL408")
    yield Case("a sweep of one value thrice", _workload(
        "params { n: int = 1 sweep [1, 1, 1] } session s repeat $n { user \"hi\"; reply 1 } }",
        ""), None)


def _tools(size: int) -> Iterator[Case]:
    yield Case("a tool result without a call", _workload(
        'session s { user "a"; reply 4; tool "result"; reply 4 } }', ""), "WL430")
    arg = "p" * min(size, bounds.MAX_LINE_CHARS - 100)
    yield Case("a long tool argument, 1,000 times", _workload(
        f'session s repeat 1000 {{ user "a"; reply 4 call read {{ path = "{arg}" }}\n'
        'tool "done"; reply 4 } }', ""), None)
    calls = " ".join(f"call c{i} {{ a = \"x\" }}" for i in range(2000))
    yield Case("2,000 tool calls in one reply", _workload(
        f'session s {{ user "a"; reply 4 {calls}\n' + 'tool "r"\n' * 2000 + "reply 4 } }",
        ""), None)


def _traces() -> Iterator[Case]:
    for name, path in (("a device", "/dev/zero"), ("a directory", "/")):
        yield Case(f"a trace that is {name}", _workload(
            f'session t trace "{path}" }}', ""), None, "WL409")


@dataclass
class Measured:
    returncode: int
    stdout: str
    stderr: str
    peak_mb: float


def wl_argv() -> list[str]:
    """`wl` next to this Python, else `python -m workloadlang.cli`."""
    script = Path(sys.executable).with_name("wl")
    return [str(script)] if script.exists() else [sys.executable, "-m", "workloadlang.cli"]


_LAUNCH = """
import os, sys
pid = os.posix_spawnp(sys.argv[2], sys.argv[2:], os.environ)
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as fh:
    fh.write(f"{os.waitstatus_to_exitcode(status)} {usage.ru_maxrss}")
"""
"""Runs the command and writes its exit code and peak RSS (KB). A child's peak counts the
memory of the process it was forked from, so the command is started by this small launcher,
not by the (possibly large) test process."""


def measured(*args: str, timeout: float = 120) -> Measured:
    """Run `wl ARGS` in a child; its exit code, output and peak RSS (Linux: `wait4`)."""
    with tempfile.TemporaryDirectory() as tmp:
        report, out, err = (Path(tmp) / name for name in ("report", "out", "err"))
        with open(out, "wb") as fout, open(err, "wb") as ferr:
            proc = subprocess.Popen([sys.executable, "-c", _LAUNCH, str(report), *wl_argv(),
                                     *args], stdout=fout, stderr=ferr, start_new_session=True)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait()
                raise
        code, peak_kb = report.read_text().split()
        return Measured(int(code), out.read_text(errors="replace"),
                        err.read_text(errors="replace"), int(peak_kb) / 1024)


_FORK_SERVER = """
import json, os, sys, traceback
from workloadlang.cli.main import main
requests, answers = sys.stdin, sys.stdout
for line in requests:
    out, err, args = json.loads(line)
    pid = os.fork()
    if pid == 0:
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 1)
        os.dup2(os.open(err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 2)
        sys.argv = ["wl", *args]
        try:
            code = main()
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    _, status, usage = os.wait4(pid, 0)
    answers.write(json.dumps([os.waitstatus_to_exitcode(status), usage.ru_maxrss]) + "\\n")
    answers.flush()
"""
"""Reads one JSON line per command (stdout path, stderr path, argv), forks a child
that runs `wl ARGV` as the console script does (`main()`, a traceback and exit 1 on an uncaught
exception) and answers its exit code and peak RSS in KB."""


class WlForker:
    """`wl` commands in children forked from one small process that has imported
    `workloadlang.cli` once: the same exit code, output and peak memory as a fresh `wl` (a fork
    starts from the server's resident imports, as a fresh `wl` has them after its own), without
    paying the interpreter's start and the imports per command. `measured` as the function of
    that name; `close` stops the server."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", _FORK_SERVER], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, start_new_session=True)

    def measured(self, *args: str, timeout: float = 120) -> Measured:
        """Run `wl ARGS` in a forked child; its exit code, output and peak RSS."""
        import select

        assert self.proc.stdin is not None and self.proc.stdout is not None
        with tempfile.TemporaryDirectory() as tmp:
            out, err = Path(tmp) / "out", Path(tmp) / "err"
            self.proc.stdin.write(json.dumps([str(out), str(err), list(args)]) + "\n")
            self.proc.stdin.flush()
            ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
            if not ready:
                self.close()
                raise subprocess.TimeoutExpired(["wl", *args], timeout)
            code, peak_kb = json.loads(self.proc.stdout.readline())
            return Measured(code, out.read_text(errors="replace"),
                            err.read_text(errors="replace"), peak_kb / 1024)

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, 9)
        self.proc.wait()
