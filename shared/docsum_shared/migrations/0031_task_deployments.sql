-- The deployment each task belongs to: the topic prefix (DOCSUM_TOPIC_PREFIX) of the gateway or the parser's
-- intake that created it. Several deployments may share one database, each with its own topics and its own
-- summarizers: a deployment's admission (services/summarizer/docsum_summarizer/admission.py) admits and
-- announces only its own tasks' chunks, on its own topics, else one deployment's chunks would be summarized
-- by another's summarizers (with that one's model, mode and limits). Rows from before belong to the default
-- deployment (no prefix).
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS deployment text NOT NULL DEFAULT '';

-- An owner's counter is kept per deployment: each deployment's slots are shared fairly between the owners
-- that use it, and what an owner was served in one deployment takes nothing from its turn in another.
ALTER TABLE owner_shares ADD COLUMN IF NOT EXISTS deployment text NOT NULL DEFAULT '';
ALTER TABLE owner_shares DROP CONSTRAINT IF EXISTS owner_shares_pkey;
ALTER TABLE owner_shares ADD PRIMARY KEY (deployment, owner);
