-- Destinations (docs/handlers.md, "Destinations"): a subscriber's flow control, and
-- what an operator or the circuit decided about each destination, so that a pause,
-- an open circuit or a disabled destination survives a restart.
ALTER TABLE subscribers ADD COLUMN max_in_flight integer;
ALTER TABLE subscribers ADD COLUMN rate_limit text;
ALTER TABLE subscribers ADD COLUMN disable_after text;

CREATE TABLE destinations (
    name                 text PRIMARY KEY,
    -- healthy | paused | failing | disabled
    state                text NOT NULL,
    state_since          timestamptz NOT NULL,
    -- a Retry-After pause: until then (NULL for an operator's pause)
    paused_until         timestamptz,
    consecutive_failures integer NOT NULL DEFAULT 0,
    last_error           text,
    -- the last successful attempt, and the first failure since (disable_after)
    last_success_at      timestamptz,
    failing_since        timestamptz
);
