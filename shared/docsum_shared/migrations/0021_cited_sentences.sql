-- The result cache keeps, beside an answer, each of its sentences with the range of the request's text
-- it quotes (docsum_shared.summarizers.base.SummarySentence, as [text, source, start, end] arrays), so
-- an answer from the cache cites as the backend's own did. NULL for answers stored before, and for
-- backends that do not say where their sentences come from.
ALTER TABLE llm_results ADD COLUMN IF NOT EXISTS sentences jsonb;
