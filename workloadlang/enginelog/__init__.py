"""The engine's own request log joined to a run's records: ground truth for reuse.

`ninfer`: read a ninfer request log and match its entries to records. `annotate`: put what
the log says into the records and the results (`wl run --engine-log`).
"""
