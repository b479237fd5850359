-- Where each unit of a document's text starts: its pages (PDF), paragraphs (DOCX) or lines (text), as
-- character offsets into document_texts.text, the first 0, one per unit in order (docsum_shared.positions).
-- A summary's sentence cites the unit its characters fall in. NULL for texts stored before.
ALTER TABLE document_texts
    ADD COLUMN IF NOT EXISTS position_unit text CHECK (position_unit IN ('page', 'paragraph', 'line')),
    ADD COLUMN IF NOT EXISTS position_starts int[];
