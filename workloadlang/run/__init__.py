"""The runner: execution only. The engine link (`link`: discovery, tokenizer, counters,
connections), calibration, the chat exchange (`endpoint`, `client`, `sse`), the executor's core
(`executor`) with its parts (`phases`, `stops`, `isolation`, `contention`, `maker`, `health`)
and pacings (`pacing`, `ahead`), records (`record`), and `runner` (one run: what was measured).
Entered through `workloadlang.api` (`open_engine`, `run_workload`)."""
