-- Destinations (docs/handlers.md, "Destinations"): a subscriber's flow control.
ALTER TABLE subscribers ADD COLUMN max_in_flight integer;
ALTER TABLE subscribers ADD COLUMN rate_limit text;
ALTER TABLE subscribers ADD COLUMN disable_after text;


-- What an operator or the circuit decided about each destination (JSON text:
-- state, since when, a Retry-After pause's end, failures in a row, the last
-- error), so that a pause, an open circuit or a disabled destination survives a
-- restart (src/processing/lane.rs).
CREATE TABLE destinations (
    name  text PRIMARY KEY,
    state text NOT NULL
);
