-- A chunk whose calls failed for a passing reason waits for its next round here, not in a consumer's
-- slot: retry_at is when it is due; a pump beside the summarizer announces it again then.
ALTER TABLE chunks ADD COLUMN retry_at timestamptz;
CREATE INDEX chunks_retry_due_idx ON chunks (retry_at) WHERE retry_at IS NOT NULL;
