-- What ties a chunk to its submission, for the admission that announces it later from another process:
-- the envelope's trace_id of the event it was cut for, and the trace it was cut in (its W3C traceparent,
-- when traces are on). A chunk's announcement and summary then stay in their submission's trace.
ALTER TABLE chunks ADD COLUMN IF NOT EXISTS trace_id text;
ALTER TABLE chunks ADD COLUMN IF NOT EXISTS traceparent text;
