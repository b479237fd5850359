-- Three more units a document's positions may count: the slides of a presentation (PPTX), the sections of
-- a web page (HTML, one per heading) and the chapters of an e-book (EPUB, one per spine document).
-- NOT VALID: the rows stored before hold only the older units, all still allowed, so they need no scan
-- under the table's lock; new rows are checked all the same.
ALTER TABLE document_texts
    DROP CONSTRAINT IF EXISTS document_texts_position_unit_check,
    ADD CONSTRAINT document_texts_position_unit_check
        CHECK (position_unit IN ('page', 'paragraph', 'slide', 'section', 'chapter', 'line')) NOT VALID;
