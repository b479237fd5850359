-- Where a chunk lies among its document's units (pages, paragraphs, lines), stored by the chunker as it
-- cuts: how many units start at or before the chunk's start, and the starts inside it. The summarizer
-- reads them with the chunk instead of counting through the document's every unit start (a long text
-- has many lines) at each claim. NULL for rows cut before: read from document_texts then.
ALTER TABLE chunks ADD COLUMN IF NOT EXISTS units_before int;
ALTER TABLE chunks ADD COLUMN IF NOT EXISTS unit_starts int[];
