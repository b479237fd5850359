-- Webhooks: the endpoints an owner registers, and the outbox of what is sent to them.
--
-- An endpoint receives the events it names for every task of its owner (all_tasks), or only for the tasks
-- that name it at submission (tasks.webhook_id). Its secret signs each delivery (Standard Webhooks: the
-- "whsec_" base64 form); it is shown once, when made or rotated. A deleted endpoint is disabled, not
-- removed: nothing more is sent to it, and its deliveries stay for the record. An endpoint belongs to the
-- deployment whose gateway registered it (migration 0031), is told of that deployment's tasks only, and is
-- sent to by that deployment's gateways, with their rules of where a request may go.
CREATE TABLE IF NOT EXISTS webhook_endpoints (
    id           text PRIMARY KEY,  -- a uuid4: unguessable
    deployment   text NOT NULL,
    owner        text NOT NULL,
    url          text NOT NULL,
    events       text[] NOT NULL,
    all_tasks    boolean NOT NULL DEFAULT true,
    secret       text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    disabled_at  timestamptz
);
CREATE INDEX IF NOT EXISTS webhook_endpoints_owner ON webhook_endpoints (owner, deployment) WHERE disabled_at IS NULL;

ALTER TABLE tasks ADD COLUMN IF NOT EXISTS webhook_id text;  -- the one endpoint a task named for itself

-- The outbox. A row is written in the transaction that stores the state change it tells of, once per
-- endpoint and change (event_key: a replayed or re-driven message finds it there and writes nothing), so
-- a change committed always has its deliveries and one rolled back has none. `id` is the webhook-id, the
-- same on every attempt. Due while next_attempt_at is set: a sender claims the row by moving it past its
-- request's time, so a sender killed mid-request leaves it due again for any other.
CREATE TABLE IF NOT EXISTS webhook_deliveries (
    id               text PRIMARY KEY,
    endpoint_id      text NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
    event_type       text NOT NULL,
    event_key        text NOT NULL,
    task_id          text,
    payload          json NOT NULL,  -- json, not jsonb: the body sent, byte for byte, on every attempt
    attempts         integer NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz,
    last_status      integer,
    last_error       text,
    delivered_at     timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    UNIQUE (endpoint_id, event_key)
);
CREATE INDEX IF NOT EXISTS webhook_deliveries_due ON webhook_deliveries (next_attempt_at)
    WHERE next_attempt_at IS NOT NULL;

-- Each attempt of a delivery: its HTTP status (none: no answer) or the error, for the delivery log.
CREATE TABLE IF NOT EXISTS webhook_attempts (
    delivery_id  text NOT NULL REFERENCES webhook_deliveries (id) ON DELETE CASCADE,
    attempt      integer NOT NULL,
    at           timestamptz NOT NULL DEFAULT now(),
    status       integer,
    error        text,
    PRIMARY KEY (delivery_id, attempt)
);
