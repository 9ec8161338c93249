-- Destinations (docs/handlers.md, "Destinations"): a subscriber's flow control.
ALTER TABLE subscribers ADD COLUMN max_in_flight INTEGER;
ALTER TABLE subscribers ADD COLUMN rate_limit TEXT;
ALTER TABLE subscribers ADD COLUMN disable_after TEXT;

-- The window's refill leaves out destinations that hold enough work in memory
-- (src/store/sqlite/due.rs): the handler in the due-work indexes lets it do so
-- from the index alone, without reading each row it passes.
DROP INDEX deliveries_fresh;
CREATE INDEX deliveries_fresh ON deliveries (id, handler)
    WHERE status IN ('pending', 'processing') AND retry_after IS NULL;
DROP INDEX deliveries_retry;
CREATE INDEX deliveries_retry ON deliveries (retry_after, id, handler)
    WHERE status IN ('pending', 'processing') AND retry_after IS NOT NULL;

-- What an operator or the circuit decided about each destination (JSON text:
-- state, since when, a Retry-After pause's end, failures in a row, the last
-- error), so that a pause, an open circuit or a disabled destination survives a
-- restart (src/processing/lane.rs).
CREATE TABLE destinations (
    name  TEXT PRIMARY KEY NOT NULL,
    state TEXT NOT NULL
);
