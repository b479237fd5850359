-- An answer cut at its bound even when asked again for a shorter one is kept, and says so: in the
-- result cache, on the chunk, as a count on its document (its chunks' and its own merge), on the task.
ALTER TABLE llm_results ADD COLUMN truncated boolean NOT NULL DEFAULT false;
ALTER TABLE chunks ADD COLUMN summary_truncated boolean NOT NULL DEFAULT false;
ALTER TABLE documents ADD COLUMN truncated_parts int NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN summary_truncated boolean NOT NULL DEFAULT false;
