-- The cluster-wide pacing of LLM calls (see ratelimit.py): one row per provider and model.
CREATE TABLE llm_rate_limits (
    key          text PRIMARY KEY,
    request_tat  timestamptz NOT NULL DEFAULT now(),
    token_tat    timestamptz NOT NULL DEFAULT now(),
    factor       float8 NOT NULL DEFAULT 1.0 CHECK (factor > 0 AND factor <= 1)
);

-- The nodes of hierarchical merges (a document's chunk summaries, a task's document summaries),
-- level by level, so the tree can be inspected; their answers are in llm_results like every other.
CREATE TABLE merge_nodes (
    scope_id    text NOT NULL,  -- the document (or task) being merged
    level       int NOT NULL,
    position    int NOT NULL,
    inputs      int NOT NULL,
    cache_key   text NOT NULL,
    summary     text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope_id, level, position)
);

-- What the submitter asked for: {"strict": bool, "language": "zh", "length": "brief", "style": "bullets"}.
ALTER TABLE tasks ADD COLUMN options jsonb NOT NULL DEFAULT '{}';
-- Which prompt made each stored summary (the model is stored beside it already).
ALTER TABLE tasks ADD COLUMN summary_prompt_version text;
ALTER TABLE documents ADD COLUMN summary_prompt_version text;
ALTER TABLE chunks ADD COLUMN summary_prompt_version text;
-- A document summarized from some of its chunks (others FAILED for good) says how much it covers.
ALTER TABLE documents ADD COLUMN coverage float8;
ALTER TABLE documents ADD COLUMN failed_chunks int[];
