-- How many requests to the provider a call in the ledger took: an answer cut at its bound is asked for
-- once more, shorter, and both are paid (their tokens are summed on the one row). 0 for a cache hit.
ALTER TABLE llm_calls ADD COLUMN IF NOT EXISTS requests int NOT NULL DEFAULT 1;
UPDATE llm_calls SET requests = 0 WHERE cached AND requests <> 0;
