-- Destinations (docs/handlers.md, "Destinations"): a subscriber's flow control, and
-- what an operator or the circuit decided about each destination, so that a pause,
-- an open circuit or a disabled destination survives a restart.
ALTER TABLE subscribers ADD COLUMN max_in_flight INTEGER;
ALTER TABLE subscribers ADD COLUMN rate_limit TEXT;
ALTER TABLE subscribers ADD COLUMN disable_after TEXT;

CREATE TABLE destinations (
    name                 TEXT PRIMARY KEY NOT NULL,
    -- healthy | paused | failing | disabled
    state                TEXT NOT NULL,
    state_since          TEXT NOT NULL,
    -- a Retry-After pause: until then (NULL for an operator's pause)
    paused_until         TEXT,
    consecutive_failures INTEGER NOT NULL DEFAULT 0,
    last_error           TEXT,
    -- the last successful attempt, and the first failure since (disable_after)
    last_success_at      TEXT,
    failing_since        TEXT
);

-- The window's refill leaves out destinations that hold enough work in memory
-- (src/store/sqlite/due.rs): the handler in the due-work indexes lets it do so
-- from the index alone, without reading each row it passes.
DROP INDEX deliveries_fresh;
CREATE INDEX deliveries_fresh ON deliveries (id, handler)
    WHERE status IN ('pending', 'processing') AND retry_after IS NULL;
DROP INDEX deliveries_retry;
CREATE INDEX deliveries_retry ON deliveries (retry_after, id, handler)
    WHERE status IN ('pending', 'processing') AND retry_after IS NOT NULL;
