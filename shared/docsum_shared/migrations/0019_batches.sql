-- Batch mode: a batch task's chunk calls go to the provider's Batch API as lines of a batch.
--
-- A batch is recorded here before anything is sent (the outbox): its state says which step comes
-- next, and its id is in the provider's metadata, so a batch created but never recorded (the process
-- died after the create) is found and adopted instead of being created again.
CREATE TABLE llm_batches (
    id               text PRIMARY KEY,          -- ours; the provider's metadata docsum_batch
    task_id          text NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    owner            text NOT NULL,
    state            text NOT NULL,             -- recorded, uploaded, creating, submitted, ended
    lines            int NOT NULL,              -- distinct requests in its input file
    input_file_id    text,
    provider_id      text,
    provider_status  text,                      -- validating, in_progress, ... as the provider last said
    lines_done       int NOT NULL DEFAULT 0,
    lines_failed     int NOT NULL DEFAULT 0,
    cancel_reason    text,                      -- why it was cancelled (deadline, paused, cancelled)
    outcome          text,                      -- completed, expired, cancelled, failed, split, lost
    error            text,
    submitted_at     timestamptz,
    ended_at         timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX llm_batches_open_idx ON llm_batches (created_at) WHERE state <> 'ended';
CREATE INDEX llm_batches_task_idx ON llm_batches (task_id);

-- One chunk's request on its way through a batch. custom_id is the request's result-cache key: the
-- same request is one line, paid once, whichever chunks ask it.
CREATE TABLE batch_lines (
    chunk_id    text PRIMARY KEY REFERENCES chunks (id) ON DELETE CASCADE,
    task_id     text NOT NULL,
    owner       text NOT NULL,
    custom_id   text NOT NULL,
    request     jsonb NOT NULL,                 -- the SummaryRequest, as sent
    batch_id    text REFERENCES llm_batches (id) ON DELETE SET NULL,
    status      text NOT NULL,                  -- queued, submitted, answered, realtime, dropped
    announce    boolean NOT NULL DEFAULT false, -- its chunk must be announced again (answered, or realtime)
    error       text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX batch_lines_task_idx ON batch_lines (task_id, status);
CREATE INDEX batch_lines_batch_idx ON batch_lines (batch_id, custom_id);
CREATE INDEX batch_lines_custom_idx ON batch_lines (custom_id) WHERE status = 'submitted';
CREATE INDEX batch_lines_announce_idx ON batch_lines (chunk_id) WHERE announce;
