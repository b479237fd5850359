-- A task may name the task its documents are new versions of (options.previous_task; the same owner's, in
-- the same deployment, checked when the task is made). Its documents are matched to the previous task's by
-- a key: the document key its submitter gave (intake's document_key), else its filename. The link is what
-- the task's view compares summaries against; the reuse itself needs none: the owner's result cache
-- answers every request it has seen. A previous task deleted leaves the link empty, not a dangling id.
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS previous_task text REFERENCES tasks (id) ON DELETE SET NULL;
CREATE INDEX IF NOT EXISTS tasks_previous_task_idx ON tasks (previous_task) WHERE previous_task IS NOT NULL;
ALTER TABLE documents ADD COLUMN IF NOT EXISTS document_key text;
