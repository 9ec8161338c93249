-- The database is the queue (docs/architecture.md): memory holds a bounded window of
-- due work, refilled from these indexes in order (src/store/sqlite/due.rs).
-- Unfinished deliveries split in two by retry_after:

-- fresh work: never tried (or replayed) deliveries, and processing ones interrupted
-- by a crash, in id (creation) order; the refill walks it from a cursor.
CREATE INDEX deliveries_fresh ON deliveries (id)
    WHERE status IN ('pending', 'processing') AND retry_after IS NULL;

-- retries by due time: the due ones are the range retry_after <= now, the next one
-- to wake up for is the first entry after now.
CREATE INDEX deliveries_retry ON deliveries (retry_after, id)
    WHERE status IN ('pending', 'processing') AND retry_after IS NOT NULL;

-- strict per-key ordering: the oldest unfinished delivery of a handler and ordering
-- value (the one allowed to run), and whether one older than a given id exists.
CREATE INDEX deliveries_key_unfinished ON deliveries (handler, ordering_value, id)
    WHERE ordering_value IS NOT NULL AND status IN ('pending', 'processing');

-- (status, retry_after) served only the startup load of every unfinished delivery,
-- which is gone; the partial indexes above replace it at about the same write cost.
DROP INDEX IF EXISTS deliveries_status;
