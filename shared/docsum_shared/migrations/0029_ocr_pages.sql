-- The text OCR read from each scanned page of a PDF, stored as each page is read: a parser killed in
-- the middle of a scan resumes at the next page, and a page read once is never read again (the first
-- reading stays). The rows stay once the document's text is stored: they tell the quote route which
-- pages were read by OCR. `page` counts from 0.
CREATE TABLE IF NOT EXISTS document_ocr_pages (
    document_id  text NOT NULL REFERENCES documents (id) ON DELETE CASCADE,
    page         integer NOT NULL CHECK (page >= 0),
    text         text NOT NULL,
    read_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (document_id, page)
);
-- What the parser is reading now, for the task's view ("reading page 41 of 300 (OCR)"); NULL once the
-- text is stored (or when nothing is being read page by page).
ALTER TABLE documents ADD COLUMN IF NOT EXISTS reading text;
