-- A task's progress as a log: every step the pipeline took for it, numbered 1, 2, 3... per task, so a
-- stream (SSE or WebSocket) can be read again from any point. `dedupe_key` names the step (the chunk
-- summarized, the document done, the pause pressed): a redelivered or re-driven event is not a second
-- entry. Numbers are handed out under the row lock of the task's `progress_heads` row, so entries of
-- a task commit in their order and a reader never sees entry n+1 before n.
CREATE TABLE progress_heads (
    task_id  text PRIMARY KEY REFERENCES tasks (id) ON DELETE CASCADE,
    seq      bigint NOT NULL
);
CREATE TABLE progress_log (
    task_id      text NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    seq          bigint NOT NULL,
    kind         text NOT NULL,
    dedupe_key   text NOT NULL,
    body         jsonb NOT NULL,
    recorded_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (task_id, seq),
    UNIQUE (task_id, dedupe_key)
);
