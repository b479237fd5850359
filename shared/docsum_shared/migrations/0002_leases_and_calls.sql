-- A chunk being summarized is leased to one process, so that two consumers never pay for it twice;
-- a lease whose holder died expires and the chunk is taken over (counted as an interruption).
ALTER TABLE chunks
    ADD COLUMN lease_owner       text,
    ADD COLUMN lease_expires_at  timestamptz,
    ADD COLUMN interruptions     int NOT NULL DEFAULT 0;

-- Every summarizer request, answered by the provider or by the result cache: usage, cost, savings.
CREATE TABLE llm_calls (
    id                 bigserial PRIMARY KEY,
    task_id            text,
    document_id        text,
    chunk_id           text,
    kind               text NOT NULL,
    cache_key          text NOT NULL,
    model              text NOT NULL,
    cached             boolean NOT NULL,
    prompt_tokens      int NOT NULL DEFAULT 0,
    completion_tokens  int NOT NULL DEFAULT 0,
    latency_ms         int NOT NULL DEFAULT 0,
    created_at         timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX llm_calls_task_idx ON llm_calls (task_id);

-- How many times the task's unfinished work was re-driven (resume, retry, reconcile).
ALTER TABLE tasks ADD COLUMN redrives int NOT NULL DEFAULT 0;
