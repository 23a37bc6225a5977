"""What the client's CPUs did in a window of a run, from the kernel's own sampling (`perf`).

`start()` runs `perf record` on the given CPUs (a `cpu-clock` sample every 1/`freq` s on each,
busy or idle, stamped on CLOCK_REALTIME so windows given in `time.time()` terms line up);
`split()` reads one window back: how long the client's process ran there, how long other tasks
ran (by name), how long the CPU was idle, and how long it left no sample — gaps between
consecutive samples of one CPU longer than two periods. A gap between two samples of running
tasks is, most likely, time in which the virtual CPU executed nothing: the VM's host had it
(preempted it, or was handling a fault of the guest's memory); from inside the guest that time
looks like the running thread's own (`time.thread_time` and the scheduler's statistics count
it as run time, and the steal counter of /proc/stat need not count it). A gap next to an idle
sample is ambiguous: an idle CPU is not always sampled (on this VM the first vCPU is sampled
in idle about 85% of the time, the second not at all — `perf record -F 2000 -e cpu-clock -C N
-- sleep 1`), so the gap may be idle time.

Needs `perf` and the right to sample every task on a CPU (root, or perf_event_paranoid <= 0).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections import Counter


def available() -> str | None:
    """Output: None when `perf record -C` can run here, else why not."""
    if shutil.which("perf") is None:
        return "perf is not installed"
    try:
        paranoid = int(open("/proc/sys/kernel/perf_event_paranoid").read())
    except (OSError, ValueError):
        return "no /proc/sys/kernel/perf_event_paranoid (not Linux?)"
    if os.geteuid() != 0 and paranoid > 0:
        return ("sampling every task of a CPU needs root or perf_event_paranoid <= 0 "
                f"(it is {paranoid})")
    return None


def start(cpus: set[int], path: str, freq: int, stacks: bool = False) -> subprocess.Popen:
    """Input: the CPUs to sample, the perf.data path, samples a second, whether to record each
    sample's call chain (`perf record -g`: the kernel's frames are complete, the interpreter's
    are not — CPython is built without frame pointers — but the innermost is exact). Output:
    the running `perf record` (stop it with `stop`)."""
    cmd = ["perf", "record", "-q", "-o", path, "-k", "CLOCK_REALTIME", "-F", str(freq),
           "-e", "cpu-clock", *(["-g"] if stacks else []),
           "-C", ",".join(map(str, sorted(cpus)))]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def stop(proc: subprocess.Popen) -> None:
    """Stop `perf record` so that it writes its file out."""
    proc.send_signal(signal.SIGINT)
    proc.wait(60)


def samples(path: str, begin: float, end: float) -> list[tuple[int, int, str, float, int]]:
    """Output: (cpu, pid, comm, unix time, tid) of every sample in [begin, end], in time
    order."""
    out = subprocess.run(["perf", "script", "-i", path, "-F", "cpu,pid,tid,comm,time",
                          "--time", f"{begin:.6f},{end:.6f}"],
                         capture_output=True, text=True, check=True).stdout
    rows = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 4 or not parts[-1].endswith(":"):
            continue
        pid, _, tid = parts[-3].partition("/")
        rows.append((int(parts[-2].strip("[]")), int(pid), " ".join(parts[:-3]),
                     float(parts[-1][:-1]), int(tid or pid)))
    return sorted(rows, key=lambda r: r[3])


# kernel frames that say why a thread was in the kernel: the outermost of them in a chain names it
_ENTRIES = (("asm_exc_page_fault", "page fault"), ("asm_sysvec_", "interrupt"),
            ("asm_common_interrupt", "interrupt"), ("ret_from_fork", "kernel thread"))


def chains(path: str, begin: float, end: float, tid: int) -> list[list[str]]:
    """Input: a perf.data recorded with `stacks`, a window in unix seconds, a thread id.
    Output: the call chain (innermost first, "symbol (dso)") of each of the thread's samples in
    the window."""
    out = subprocess.run(["perf", "script", "-i", path, "-F", "tid,time,ip,sym,dso",
                          "--tid", str(tid), "--time", f"{begin:.6f},{end:.6f}"],
                         capture_output=True, text=True, check=True).stdout
    return parse_chains(out)


def parse_chains(text: str) -> list[list[str]]:
    """Input: `perf script -F tid,time,ip,sym,dso` output of a `-g` recording. Output: one
    list of frames per sample, innermost first, each "symbol (dso file name)"."""
    samples: list[list[str]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        if line.rstrip().endswith(":"):  # a sample's header: "  tid time:"
            samples.append([])
            continue
        addr, _, rest = line.strip().partition(" ")
        sym, _, dso = rest.rpartition(" (")
        if samples:
            samples[-1].append(f"{sym or addr} ({os.path.basename(dso.rstrip(')'))})")
    return samples


def why(chain: list[str]) -> str:
    """Input: one sample's chain, innermost first. Output: what the thread was doing: a system
    call's name ("syscall write"), "page fault", "interrupt", "kernel thread", or "user" (it
    ran its own code: the interpreter, a library)."""
    for frame in reversed(chain):  # outermost first: the entry into the kernel
        name = frame.split(" (")[0]
        for prefix, label in _ENTRIES:
            if name.startswith(prefix):
                return label
        if name.startswith(("__x64_sys_", "__do_sys_")):
            return "syscall " + name.split("sys_", 1)[1]
    return "user"


def summarise(samples: list[list[str]], freq: int, top: int = 5) -> str:
    """Input: `chains` of one window, the sampling rate. Output: one line: milliseconds by what
    the thread was doing (`why`), then by innermost frame, the largest first."""
    ms = lambda n: f"{n * 1000 / freq:.1f}"
    by_why = Counter(why(c) for c in samples if c)
    by_leaf = Counter(c[0] for c in samples if c)
    return ("; ".join(f"{k} {ms(v)} ms" for k, v in by_why.most_common(top))
            + " | innermost: " + "; ".join(f"{k} {ms(v)}" for k, v in by_leaf.most_common(top)))


def split(path: str, begin: float, end: float, client_pid: int, freq: int) -> dict:
    """Input: a perf.data of `start`, a window in unix seconds, the client's pid, the sampling
    rate. Output: `account` of the window's samples."""
    rows = samples(path, begin - 1.0, end + 1.0)  # with the samples opening and closing gaps
    return account(rows, begin, end, client_pid, freq)


def account(rows: list[tuple], begin: float, end: float, client_pid: int, freq: int) -> dict:
    """Input: `samples` rows (time order; without a tid, the pid stands for it) reaching past
    both ends of the window [begin, end], the client's pid, the sampling rate. Output:
    milliseconds of the window in which the sampled CPUs ran the client (`client`; of it, its
    main thread — the event loop, whose thread id is the pid — `client_loop`; the rest is the
    socket reader thread), ran other tasks (`others`, by name), were idle
    (`idle`), or left no sample: where a CPU's consecutive samples are more than two periods
    apart, the time between them not stood for by the later one (a sample stands for the
    period before it) — `unsampled_busy` when a task ran at both ends of the gap (the CPU
    most likely did not run: the host had it), `unsampled_idle` when an end is idle (an idle
    CPU is not always sampled)."""
    period = 1.0 / freq
    last: dict[int, tuple[int, float]] = {}
    client = loop = idle = busy_gap = idle_gap = 0.0
    others: Counter = Counter()
    for cpu, pid, comm, t, *tid in rows:
        prev = last.get(cpu)
        last[cpu] = (pid, t)
        if prev is not None and t - prev[1] > 2 * period:  # no sample in (prev, t - period)
            gap = max(0.0, min(t - period, end) - max(prev[1], begin))
            if pid != 0 and prev[0] != 0:
                busy_gap += gap
            else:
                idle_gap += gap
        if prev is None or not begin <= t <= end:
            continue
        if pid == client_pid:
            client += period
            loop += period if (tid[0] if tid else pid) == client_pid else 0.0
        elif pid == 0:
            idle += period
        else:
            others[comm] += period
    ms = lambda s: round(s * 1000, 1)
    return {"client": ms(client), "client_loop": ms(loop),
            "others": {k: ms(v) for k, v in others.most_common()},
            "idle": ms(idle), "unsampled_busy": ms(busy_gap), "unsampled_idle": ms(idle_gap)}


def describe(parts: dict) -> str:
    """Output: `split`'s result as one line."""
    others = sum(parts["others"].values())
    names = ", ".join(f"{k} {v}" for k, v in list(parts["others"].items())[:3])
    return (f"client ran {parts['client']} ms (its loop's thread {parts['client_loop']}), "
            f"other tasks {others:.1f} ms"
            + (f" ({names})" if names else "")
            + f", idle {parts['idle']} ms; no sample {parts['unsampled_busy']} ms between busy"
            f" samples (the host had the CPU), {parts['unsampled_idle']} ms next to idle")
