-- An Idempotency-Key is a key of its owner in one deployment (migration 0031): several deployments sharing
-- the database may know the same owner name, and one's gateway must never replay the answer another's gave
-- (a task it cannot even read), nor refuse a request because another deployment used the key. Rows from
-- before belong to the deployment of the task they name (the default deployment, no prefix, for tasks from
-- before 0031).
ALTER TABLE idempotency_keys ADD COLUMN IF NOT EXISTS deployment text NOT NULL DEFAULT '';
UPDATE idempotency_keys k SET deployment = t.deployment FROM tasks t WHERE t.id = k.task_id AND k.deployment <> t.deployment;
ALTER TABLE idempotency_keys DROP CONSTRAINT IF EXISTS idempotency_keys_pkey;
ALTER TABLE idempotency_keys ADD PRIMARY KEY (deployment, owner, key);
