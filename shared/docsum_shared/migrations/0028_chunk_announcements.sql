-- When a re-drive last announced a chunk on chunk-created, until a summarizer takes that announcement up
-- (its claim clears it, whether it takes the chunk or drops it because the task is held). A re-drive
-- leaves a chunk announced within DOCSUM_REDRIVE_ANNOUNCED_S alone: its message is still queued, and
-- one more adds nothing. NULL: no announcement on its way that PostgreSQL knows of (rows from before,
-- and the chunker's first announcement, which goes out with the rows): the next re-drive announces it.
ALTER TABLE chunks ADD COLUMN IF NOT EXISTS announced_at timestamptz;
