-- Re-drives an owner asks for (POST /v1/reconcile, resume, retry), one at a time per owner across every
-- gateway replica and paced by GCRA (docsum_gateway.routers.maintenance): a row per owner, locked while
-- the decision is made, on the database's clock.
CREATE TABLE IF NOT EXISTS redrive_gates (
    owner          text PRIMARY KEY,
    tat            float8 NOT NULL DEFAULT 0,  -- theoretical arrival time, seconds since the epoch
    claimed_at     timestamptz,                -- the running re-drive's claim (its token), if any
    running_until  timestamptz                 -- its lease: renewed while it publishes, so a gateway that
                                               -- dies mid-way holds the owner back only this long
);
