"""A run sharded by session over several worker processes, merged into one result.

`partition` splits a `Plan` into shards (a session never splits) with their share of the
concurrency limit, `clocks` puts every worker's times on the driver's clock, `coordinate` holds
the run-wide state the shards share (phase barriers, the one isolation), and `ray_run` runs the
shards on Ray workers (`wl run --workers N`). Nothing here imports Ray except `ray_run`, and
nothing outside this package imports `ray_run` unless `--workers` is given.
"""


class ScaleError(ValueError):
    """A sharded run that cannot start as asked (exit 2): the message says why."""
