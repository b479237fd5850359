-- A chunk's rank in the fair order between owners, given when the admission admits it: the tier it was
-- granted in (0 urgent within its credit, 1 normal and aged background, 2 background), then its owner's
-- counter when it was granted (the start tag of weighted fair queueing). A summarizer serves the chunks
-- it holds lowest rank first, so that a newcomer's chunk is not called after every spare chunk announced
-- before it. NULL for chunks admitted before this column existed and in first-in-first-out order
-- (DOCSUM_ADMISSION_ORDER=fifo): those are served in the order they reach the summarizer, ahead of ranked
-- ones (a finite set, or every chunk: never one left behind an endless run of ranked chunks).
ALTER TABLE chunks ADD COLUMN IF NOT EXISTS fair_tier smallint;
ALTER TABLE chunks ADD COLUMN IF NOT EXISTS fair_start double precision;
