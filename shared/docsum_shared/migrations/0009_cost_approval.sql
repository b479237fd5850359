-- A task whose estimated LLM calls or cost exceed its owner's ceiling waits, AWAITING_APPROVAL, before
-- its first call over it; `approved` records that the owner said yes (resume), so it never waits again.
ALTER TABLE tasks ADD COLUMN approved boolean NOT NULL DEFAULT false;
ALTER TABLE tasks ADD COLUMN hold_reason text;
