-- The Idempotency-Key of each POST /v1/tasks that sent one: per owner, the request's fingerprint (its files'
-- hashes and its fields) and the answer it got. The row is written in the transaction that stores the task,
-- so a key either names a stored task and its answer or nothing at all: a gateway killed after the commit
-- leaves the answer for any replica to replay. Rows past `expires_at` count as absent and are pruned by the
-- gateway's pruning loop.
CREATE TABLE IF NOT EXISTS idempotency_keys (
    owner        text NOT NULL,
    key          text NOT NULL,
    fingerprint  text NOT NULL,
    task_id      text NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    status_code  integer NOT NULL,
    response     json NOT NULL,  -- json, not jsonb: the answer's text as it was sent, byte for byte
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    PRIMARY KEY (owner, key)
);
CREATE INDEX IF NOT EXISTS idempotency_keys_expiry ON idempotency_keys (expires_at);
CREATE INDEX IF NOT EXISTS idempotency_keys_task ON idempotency_keys (task_id);
