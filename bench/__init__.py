"""The benchmarks behind the figures in docs/performance.md (run from the repository's root:
`python -m bench.NAME`); `bench.harness` is what they share."""
