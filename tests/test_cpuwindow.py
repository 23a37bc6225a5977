"""bench/cpuwindow.py's accounting of a window from kernel samples (the perf run itself needs
root and is exercised by `bench/scale.py --pin --perf HZ`)."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "bench"))

from cpuwindow import account, describe, parse_chains, summarise, why  # noqa: E402

CLIENT = 42


def test_a_window_is_split_into_client_others_idle_and_unsampled_time() -> None:
    """1 kHz on CPU 0: the client runs 0-3 ms, a kernel thread 3-4, idle 4-6, then no sample
    for 6-11 ms (next to idle: ambiguous), the client again 11-13, no sample for 13-20 (busy at
    both ends: the CPU did not run), the client from 20. Window 1-18 ms."""
    ms = 0.001
    rows = [(0, CLIENT, "wl", t * ms) for t in (0, 1, 2, 3)]
    rows += [(0, 77, "kdamond.0", 4 * ms), (0, 0, "swapper", 5 * ms), (0, 0, "swapper", 6 * ms)]
    rows += [(0, CLIENT, "wl", t * ms) for t in (11, 12, 13, 20, 21)]
    out = account(rows, 1 * ms, 18 * ms, CLIENT, 1000)
    assert out == {"client": 6.0, "client_loop": 6.0, "others": {"kdamond.0": 1.0}, "idle": 2.0,
                   "unsampled_busy": 5.0, "unsampled_idle": 4.0}


def test_a_gap_reaching_past_the_window_counts_only_its_part_inside() -> None:
    ms = 0.001
    rows = [(0, CLIENT, "wl", 0.0), (0, CLIENT, "wl", 20 * ms)]
    assert account(rows, 5 * ms, 10 * ms, CLIENT, 1000)["unsampled_busy"] == 5.0
    # samples a little late (jitter under two periods) leave no unsampled time
    rows = [(0, CLIENT, "wl", t * 1.4 * ms) for t in range(10)]
    assert account(rows, 1 * ms, 12 * ms, CLIENT, 1000)["unsampled_busy"] == 0.0


def test_each_cpu_has_its_own_gaps() -> None:
    ms = 0.001
    rows = sorted([(0, CLIENT, "wl", t * ms) for t in range(11)]
                  + [(1, CLIENT, "wl", 0.0), (1, CLIENT, "wl", 10 * ms)], key=lambda r: r[3])
    out = account(rows, 0.0, 10 * ms, CLIENT, 1000)
    assert out["unsampled_busy"] == 9.0 and out["client"] == 11.0


def test_the_clients_loop_thread_is_told_from_its_reader_thread() -> None:
    """Rows with thread ids: the loop's thread has the pid as its id, the socket reader another
    one. 1 kHz on CPU 0: the loop 0-2 ms, the reader 3, kdamond 4-7, the reader 8, the loop 9-10
    — the loop waited through kdamond's stretch, the reader ran on both sides of it."""
    ms = 0.001
    reader = CLIENT + 5
    rows = [(0, CLIENT, "wl", t * ms, CLIENT) for t in (0, 1, 2)]
    rows += [(0, CLIENT, "wl", 3 * ms, reader)]
    rows += [(0, 77, "kdamond.0", t * ms, 77) for t in (4, 5, 6, 7)]
    rows += [(0, CLIENT, "wl", 8 * ms, reader)]
    rows += [(0, CLIENT, "wl", t * ms, CLIENT) for t in (9, 10, 11)]
    out = account(rows, 0.5 * ms, 10.5 * ms, CLIENT, 1000)
    assert (out["client"], out["client_loop"], out["others"]) == (6.0, 4.0, {"kdamond.0": 4.0})
    assert "client ran 6.0 ms (its loop's thread 4.0)" in describe(out)


CHAINS = """\
   812 1796019014.927600: 
\tffffffff8124d0c1 clear_page_erms ([kernel.kallsyms])
\tffffffff81a0e3f2 do_anonymous_page ([kernel.kallsyms])
\tffffffff81a01234 exc_page_fault ([kernel.kallsyms])
\tffffffff82200b26 asm_exc_page_fault ([kernel.kallsyms])
\t55d0c3a2b0f1 _PyObject_Malloc (/usr/bin/python3.11)

   812 1796019014.928100: 
\tffffffff81cf11aa tcp_sendmsg ([kernel.kallsyms])
\tffffffff81b00aa1 __x64_sys_sendto ([kernel.kallsyms])
\tffffffff81b00001 do_syscall_64 ([kernel.kallsyms])
\tffffffff82200099 entry_SYSCALL_64 ([kernel.kallsyms])
\t7f3a1b2c3d4e __send (/lib/x86_64-linux-gnu/libc.so.6)

   812 1796019014.928600: 
\t55d0c3a2c001 _PyEval_EvalFrameDefault (/usr/bin/python3.11)

   812 1796019014.929100: 
\t7f3a1b2c3d4e [unknown] (/usr/lib/libz.so.1)
"""


def test_chains_say_what_the_thread_was_doing():
    samples = parse_chains(CHAINS)
    assert [c[0] for c in samples] == [
        "clear_page_erms ([kernel.kallsyms])", "tcp_sendmsg ([kernel.kallsyms])",
        "_PyEval_EvalFrameDefault (python3.11)", "[unknown] (libz.so.1)"]
    assert len(samples[0]) == 5 and samples[0][-1] == "_PyObject_Malloc (python3.11)"
    assert [why(c) for c in samples] == ["page fault", "syscall sendto", "user", "user"]
    line = summarise(samples, 2000)
    assert line.startswith("user 1.0 ms; ")
    assert "page fault 0.5 ms" in line and "syscall sendto 0.5 ms" in line
    assert "innermost: " in line and "_PyEval_EvalFrameDefault" in line


def test_a_page_fault_inside_a_system_call_counts_as_the_call():
    chain = ["clear_page_erms (k)", "asm_exc_page_fault (k)", "_copy_to_user (k)",
             "__x64_sys_recvfrom (k)", "do_syscall_64 (k)", "entry_SYSCALL_64 (k)", "recv (libc)"]
    assert why(chain) == "syscall recvfrom"
