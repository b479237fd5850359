-- A document's progress, counted in the same transaction as each chunk's move to a final status, so
-- that the merger decides a document's completion from one row (not by reading every chunk on every
-- event) and a task's remaining work is a sum over its documents, not over its chunks.
ALTER TABLE documents
    ADD COLUMN chunks_completed        int NOT NULL DEFAULT 0,
    ADD COLUMN chunks_failed           int NOT NULL DEFAULT 0,
    ADD COLUMN pending_token_estimate  bigint NOT NULL DEFAULT 0;

UPDATE documents d SET
    chunks_completed = c.completed,
    chunks_failed = c.failed,
    pending_token_estimate = c.pending_tokens
FROM (
    SELECT document_id,
           count(*) FILTER (WHERE status = 'COMPLETED') AS completed,
           count(*) FILTER (WHERE status = 'FAILED') AS failed,
           coalesce(sum(coalesce(token_estimate, token_estimate_upper(context_before || text || context_after)))
                    FILTER (WHERE status IN ('PENDING', 'SUMMARIZING')), 0) AS pending_tokens
    FROM chunks GROUP BY document_id
) c
WHERE c.document_id = d.id;

-- The recent call rate behind a task's ETA reads only the last minute of its calls.
CREATE INDEX llm_calls_task_time_idx ON llm_calls (task_id, created_at);
