-- A stream ticket is good for one connection across every gateway replica and restart: the nonce of
-- each redeemed ticket is kept here until the ticket has expired (then it is refused for its age).
CREATE TABLE IF NOT EXISTS stream_ticket_nonces (
    nonce       text PRIMARY KEY,
    expires_at  timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS stream_ticket_nonces_expiry ON stream_ticket_nonces (expires_at);

-- What the progress log last told of each document ({document_id: {status, percent, chunks}}): an
-- entry carries only the documents whose state changed since, so its size does not grow with the
-- task's documents. Written under the head row's lock, with the entries.
ALTER TABLE progress_heads ADD COLUMN IF NOT EXISTS told jsonb NOT NULL DEFAULT '{}';
