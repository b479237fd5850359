-- A batch and its lines belong to the endpoint and model they were made for (the LLM settings' endpoint
-- key): a batch driver configured for another endpoint leaves them alone, rather than asking its own
-- provider about a batch it never had.
ALTER TABLE batch_lines ADD COLUMN IF NOT EXISTS endpoint text NOT NULL DEFAULT '';
ALTER TABLE llm_batches ADD COLUMN IF NOT EXISTS endpoint text NOT NULL DEFAULT '';
CREATE INDEX IF NOT EXISTS batch_lines_endpoint_idx ON batch_lines (endpoint, status);
