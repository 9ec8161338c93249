-- Filters (SPEC §12): a subscriber's filter as the JSON text it was given; NULL
-- when it has none (every event of its types).
ALTER TABLE subscribers ADD COLUMN filter text;
