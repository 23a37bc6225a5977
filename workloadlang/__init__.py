"""workloadlang: a workload language and runner that measures what an inference engine's prefix
cache really keeps under agentic load.

Pipeline (one module per stage): grammars/workload.lark -> parse -> ir -> check -> plan -> run ->
gates -> report. `workloadlang.api` is the front door that chains them.
"""

__version__ = "0.1.0"
