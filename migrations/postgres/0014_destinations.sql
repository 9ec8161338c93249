-- Destinations (docs/handlers.md, "Destinations"): a subscriber's flow control.
ALTER TABLE subscribers ADD COLUMN max_in_flight integer;
ALTER TABLE subscribers ADD COLUMN rate_limit text;
ALTER TABLE subscribers ADD COLUMN disable_after text;

