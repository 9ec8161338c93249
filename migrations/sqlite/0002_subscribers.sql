-- Subscribers: http handlers registered at run time through the API (SPEC §4).
-- event_types and backoff are JSON arrays of text. The secret is kept as given
-- (whsec_...); it is needed to sign every delivery.
CREATE TABLE subscribers (
    name         TEXT PRIMARY KEY NOT NULL,
    event_types  TEXT NOT NULL,
    url          TEXT NOT NULL,
    secret       TEXT,
    ordering_key TEXT,
    max_attempts INTEGER,
    backoff      TEXT,
    active       INTEGER NOT NULL DEFAULT 1,
    created_at   TEXT NOT NULL,
    updated_at   TEXT NOT NULL
);

-- Dead letters are listed newest first.
CREATE INDEX deliveries_failed ON deliveries (id) WHERE status = 'failed';
