-- Fair shares between owners (the summarizer's admission, services/summarizer/docsum_summarizer/admission.py).
-- A chunk is ready when it is stored, and admitted when the admission pump gives it one of the deployment's
-- slots, in the fair order between owners; only then is it announced on chunk-created and may a summarizer
-- claim it. `charged` is what its owner's counter was charged for it (the estimate at admission, replaced
-- by the provider's usage once answered).
-- Rows from before were announced by the chunker already: they count as admitted (the column's default
-- fills them, then it is dropped: a new row waits for admission).
ALTER TABLE chunks ADD COLUMN IF NOT EXISTS ready_at timestamptz NOT NULL DEFAULT now();
ALTER TABLE chunks ADD COLUMN IF NOT EXISTS admitted_at timestamptz DEFAULT now();
ALTER TABLE chunks ALTER COLUMN admitted_at DROP DEFAULT;
ALTER TABLE chunks ADD COLUMN IF NOT EXISTS charged float8 NOT NULL DEFAULT 0;

-- The work waiting for admission, oldest first; and the admitted work not finished (the slots in use).
CREATE INDEX IF NOT EXISTS chunks_waiting_admission_idx ON chunks (ready_at, id)
    WHERE admitted_at IS NULL AND status = 'PENDING';
CREATE INDEX IF NOT EXISTS chunks_admitted_unfinished_idx ON chunks (document_id)
    WHERE admitted_at IS NOT NULL AND status IN ('PENDING', 'SUMMARIZING');

-- Each owner's counter of the tokens it has been served, divided by its weight (virtual tokens): the
-- next slot goes to the owner with ready work and the lowest counter. Shared by every summarizer replica,
-- kept across restarts. `lifted`: what the counter was raised by when its owner came back from idle, so
-- that counter = lifted + the owner's chunks' `charged` / weight can be checked.
CREATE TABLE IF NOT EXISTS owner_shares (
    owner       text PRIMARY KEY,
    counter     float8 NOT NULL DEFAULT 0 CHECK (counter >= 0),
    lifted      float8 NOT NULL DEFAULT 0,
    updated_at  timestamptz NOT NULL DEFAULT now()
);
