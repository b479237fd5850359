-- When the task first needed recovery (a re-drive, or a chunk taken over from a dead process): its
-- end then gives the time to recover (docsum_recovery_seconds).
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS recovering_since timestamptz;
