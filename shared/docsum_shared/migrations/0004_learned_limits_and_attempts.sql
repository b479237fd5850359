-- What docsum learned of each LLM endpoint and model (keyed like llm_rate_limits): the input budget in
-- tokens, lowered when the provider refuses a prompt as too long, so that every replica (and every
-- restart) plans its requests under it at once.
CREATE TABLE llm_endpoints (
    key             text PRIMARY KEY,
    context_tokens  int CHECK (context_tokens > 0),
    learned_from    text,
    updated_at      timestamptz NOT NULL DEFAULT now()
);

-- Failed attempts are stored on their item, so that a re-drive continues the count instead of
-- starting again from zero (a chunk's `attempts` counts every try, failures only the failed ones).
ALTER TABLE chunks ADD COLUMN failures int NOT NULL DEFAULT 0;
ALTER TABLE documents ADD COLUMN merge_failures int NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN merge_failures int NOT NULL DEFAULT 0;

-- Re-drives of a document that found it where the previous one left it: after a bounded number the
-- document is FAILED with its last error instead of being re-driven forever.
ALTER TABLE documents ADD COLUMN redrive_mark text;
ALTER TABLE documents ADD COLUMN stalled_redrives int NOT NULL DEFAULT 0;
