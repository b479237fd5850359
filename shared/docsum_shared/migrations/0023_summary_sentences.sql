-- Every stored summary keeps its sentences, each with where it is in the summary's text, its support
-- (cited, aligned, synthesis) and its sources: ranges of documents' extracted texts, with the page (or
-- paragraph, or line) each starts in (docsum_shared.summarizers.citations.to_json). A chunk's sentences
-- cite its document's text; a merge node's, a document's and a task's carry the sources of the
-- sentences they were made from, down to the chunks'. NULL for summaries stored before, and where the
-- backend does not say where its sentences come from.
ALTER TABLE chunks ADD COLUMN IF NOT EXISTS summary_sentences jsonb;
ALTER TABLE merge_nodes ADD COLUMN IF NOT EXISTS sentences jsonb;
ALTER TABLE documents ADD COLUMN IF NOT EXISTS summary_sentences jsonb;
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS summary_sentences jsonb;
