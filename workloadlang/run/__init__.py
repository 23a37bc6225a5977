"""The runner: transport (`client`, `evidence`, `errors`), engine discovery (`discover`), the
`/metrics` cross-check (`metrics`), the engine request-log join (`enginelog`) and the executor."""
