-- The tier a call was answered at ("realtime", "flex"), which is what it is priced at.
ALTER TABLE llm_calls ADD COLUMN IF NOT EXISTS tier text NOT NULL DEFAULT 'realtime';
