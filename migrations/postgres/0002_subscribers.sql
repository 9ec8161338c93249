-- Subscribers: http handlers registered at run time through the API (SPEC §4).
-- event_types and backoff are JSON arrays as text, as on SQLite. The secret is
-- kept as given (whsec_...); it is needed to sign every delivery.
CREATE TABLE subscribers (
    name         text PRIMARY KEY,
    event_types  text NOT NULL,
    url          text NOT NULL,
    secret       text,
    ordering_key text,
    max_attempts integer,
    backoff      text,
    active       boolean NOT NULL DEFAULT true,
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL
);
