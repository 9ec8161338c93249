-- Events: one row per accepted webhook. Ids are UUID v7 text (they sort by time);
-- timestamps are RFC 3339 UTC text with milliseconds (they sort as text).
CREATE TABLE events (
    id              TEXT PRIMARY KEY NOT NULL,
    idempotency_key TEXT NOT NULL UNIQUE,
    event_type      TEXT NOT NULL,
    payload         TEXT NOT NULL,
    payload_sha256  TEXT NOT NULL,
    status          TEXT NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'processing', 'completed', 'failed')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    last_error      TEXT,
    retry_after     TEXT,
    created_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL
);

CREATE INDEX events_status_created ON events (status, created_at);
CREATE INDEX events_type_id ON events (event_type, id);

-- Deliveries: one row per event x matching handler, with the same lifecycle.
CREATE TABLE deliveries (
    id             TEXT PRIMARY KEY NOT NULL,
    event_id       TEXT NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    handler        TEXT NOT NULL,
    ordering_value TEXT,
    status         TEXT NOT NULL DEFAULT 'pending'
                   CHECK (status IN ('pending', 'processing', 'completed', 'failed')),
    attempts       INTEGER NOT NULL DEFAULT 0,
    last_error     TEXT,
    retry_after    TEXT,
    created_at     TEXT NOT NULL,
    updated_at     TEXT NOT NULL,
    UNIQUE (event_id, handler)
);

CREATE INDEX deliveries_status ON deliveries (status, retry_after);
CREATE INDEX deliveries_ordering ON deliveries (handler, ordering_value, created_at)
    WHERE ordering_value IS NOT NULL;
