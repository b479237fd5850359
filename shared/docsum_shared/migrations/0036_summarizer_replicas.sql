-- The summarizer processes alive in each deployment, each with the calls it runs at once: the admission's
-- window follows them (the sum of their calls in flight, plus a few spare slots each). A process
-- refreshes its row every few seconds and deletes it when it stops cleanly; a row not refreshed for a
-- few of those periods (its process died) does not count, and is deleted by the next refresh.
CREATE TABLE IF NOT EXISTS summarizer_replicas (
    deployment text NOT NULL,
    holder text NOT NULL,
    llm_max_inflight integer NOT NULL CHECK (llm_max_inflight > 0),
    seen_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (deployment, holder)
);
