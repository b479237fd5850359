-- API keys an operator creates and revokes (the gateway also takes DOCSUM_API_KEYS). A key reads
-- dsk_<id>_<secret>; only HMAC-SHA256 of the secret is kept (docsum_gateway.security.key_hash).
CREATE TABLE api_keys (
    id            text PRIMARY KEY,
    owner         text NOT NULL,
    name          text,                      -- what the operator called it ("ci", "alice's laptop")
    key_hash      text NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    last_used_at  timestamptz,               -- to the minute: is anything still using it?
    revoked_at    timestamptz                -- set: refused from the next request on
);
CREATE INDEX api_keys_owner ON api_keys (owner);

-- Task creation per owner, paced by GCRA across every gateway replica (docsum_gateway.policy).
CREATE TABLE task_rate_limits (
    owner  text PRIMARY KEY,
    tat    float8 NOT NULL  -- theoretical arrival time, seconds since the epoch (the database's clock)
);
