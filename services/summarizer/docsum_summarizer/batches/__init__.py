"""Batch mode: a batch task's chunk calls go to the provider's Batch API, at about half the price.

The chunk handler queues a chunk's request as a line (`batch_lines`) instead of calling; the batch
driver (driver.py, one per cluster at a time) gathers each task's queued lines into batches, records
every batch before it sends anything, submits, polls, and ingests what the provider answered. An
answered line is stored in the result cache and its chunk announced again: the handler then completes
it from there. A line the batch did not answer (failed, expired, cancelled for the deadline) goes back
to its chunk as a realtime call. policy.py decides, repository.py stores, driver.py talks to the provider.
"""
