-- The durable rejected log (SPEC §11): requests that /ingest/{name} refused,
-- shared by every instance, kept so that an operator can see why and retry them
-- once the cause is fixed. `class` separates requests that failed verification
-- (`unverified`) from verified ones refused later (`verified`), so a flood of
-- unsigned junk cannot push a real sender's entries out: each class has its own
-- bounds. `headers` is a JSON array of [name, value] pairs without the
-- secret-bearing ones; `body` the raw bytes as sent; `received_at` unix ms;
-- `delivery_id` the sender's id when it could be read (erasure finds copies by it).
CREATE TABLE rejected_requests (
    id          text PRIMARY KEY,
    source      text NOT NULL,
    class       text NOT NULL,
    received_at bigint NOT NULL,
    reason      text NOT NULL,
    status      integer NOT NULL,
    code        text NOT NULL,
    detail      text NOT NULL,
    headers     text NOT NULL,
    body        bytea NOT NULL,
    body_bytes  bigint NOT NULL,
    delivery_id text,
    retryable   boolean NOT NULL
);
CREATE INDEX rejected_by_class ON rejected_requests (source, class, id, body_bytes);
CREATE INDEX rejected_by_source ON rejected_requests (source, id);
CREATE INDEX rejected_by_age ON rejected_requests (received_at);
CREATE INDEX rejected_by_delivery ON rejected_requests (source, delivery_id);
