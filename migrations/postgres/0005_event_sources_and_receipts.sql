-- Sources (SPEC §6) and receipts (SPEC §2): which source an event came from (NULL
-- for POST /webhooks), how many requests carried it (1 plus one per duplicate
-- answered 200), and when the latest of them arrived (NULL until a duplicate
-- arrives: read as created_at). Columns with constant defaults rewrite no row.
ALTER TABLE events ADD COLUMN source text;
ALTER TABLE events ADD COLUMN received_count integer NOT NULL DEFAULT 1;
ALTER TABLE events ADD COLUMN last_received_at timestamptz;
