-- Less work per event for the database (measured with scripts/bench-pg.sh e2e and
-- pg_stat_statements; figures in the README's "Benchmarks").
--
-- deliveries_status (0001) held every version of every delivery: a delivery is
-- written three times (inserted, claimed, finished), and a status change is never
-- a HOT update, so each added an entry — three of the ~23 index entries an event
-- cost. Every reader of work has its own partial index since 0004 and 0010
-- (deliveries_ready, deliveries_retry, deliveries_leases); what remained for it
-- were the dead letters, which now have an index of their own holding only them,
-- newest first by id as the API and the console page them.
CREATE INDEX deliveries_dead ON deliveries (id) WHERE status = 'failed';
DROP INDEX deliveries_status;

-- ANALYZE (young tables are analysed as they double, src/store/postgres/young.rs)
-- spent half its time on statistics of the payloads, which no query filters by:
-- 207 ms for events at 50,000 rows, 101 ms without them.
ALTER TABLE events ALTER COLUMN payload SET STATISTICS 0;
ALTER TABLE events ALTER COLUMN payload_sha256 SET STATISTICS 0;

-- events_status_created (0001) held every version of every event; what reads it
-- wants the unfinished ones only (the pending gauge: their count and the oldest;
-- the list of unsettled events at start). A finished event's version now adds no
-- entry; finished ones are read through events_terminal_created (0003).
CREATE INDEX events_active ON events (created_at) WHERE status IN ('pending', 'processing');
DROP INDEX events_status_created;

-- The foreign keys to events cost each inserted delivery and attempt a trigger and
-- a lookup of its event (`SELECT … FOR KEY SHARE`, 200,000 of them for 100,000
-- events end to end). Hookbox inserts deliveries only in the statement that inserts
-- their event, and attempts only for deliveries it holds; retention, the only
-- delete, removes an event's deliveries and attempts in the statement that removes
-- the event (src/store/postgres/mod.rs, PURGE) instead of by cascade.
ALTER TABLE deliveries DROP CONSTRAINT deliveries_event_id_fkey;
ALTER TABLE attempts DROP CONSTRAINT attempts_event_id_fkey;
