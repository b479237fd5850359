"""A task's progress, from the pipeline's events to the page, in the order the files are read:

1. `recorder/`: a Kafka consumer group in every gateway process (`consumer.py`) reads the pipeline's
   topics; `handlers.py` takes each event, `policy.py` says which entries it adds to its task's log,
   `repository.py` appends them to the `progress_log` table in PostgreSQL (once per step) and NOTIFYs.
2. `streams.py`: follows a task's log (the entries after a point, then each new one as it is stored).
3. `docsum_gateway/routers/progress.py`: serves the streams over SSE and WebSocket.
4. `docsum_gateway/static/`: the page that shows them.
"""
