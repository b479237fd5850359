-- What an owner approves is a plan, not a blank cheque: the calls and the cost shown when the task was held
-- (held_*), copied to approved_* by resume. A task whose plan grows beyond it is held again.
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS held_calls integer;
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS held_cost_usd double precision;
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS approved_calls integer;
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS approved_cost_usd double precision;
-- Tasks approved before plans were kept were approved whatever they cost: they stay so.
UPDATE tasks SET approved_calls = 2147483647, approved_cost_usd = 'Infinity' WHERE approved AND approved_calls IS NULL;
ALTER TABLE tasks DROP COLUMN IF EXISTS approved;
