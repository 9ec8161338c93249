-- SQLite's migration 0008 adds indexes on due work (fresh deliveries by id, retries
-- by due time, the unfinished deliveries of an ordering key) so that the SQLite
-- backend can keep only a bounded window of due work in memory. PostgreSQL has had
-- the equivalents since 0004 (deliveries_fresh by seq, deliveries_retry by
-- retry_after; the claim query finds older deliveries of a key through
-- deliveries_ordering), so its schema needs no change: this migration keeps the
-- two numberings in step.
SELECT 1;
