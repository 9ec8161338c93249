-- An event's row is updated in place (issue 28, item 4).
--
-- Each outcome batch sets its events' status, attempts, last_error and updated_at
-- (hookbox_settle_locked, 0013). Two partial indexes named `status` in their
-- predicate (events_active, 0012; events_terminal_created, 0003), so no such update
-- could be HOT: every one wrote a new copy of the whole row, payload and all
-- (about 1 KB of WAL), and an entry in each of the table's five indexes, and left
-- a dead version for vacuum. The PostgreSQL soak hour wrote 13.6 KB of WAL per
-- event and forced a checkpoint every 40 s.
--
-- No index of events names a column an update changes now, and pages are filled
-- only half at insert, so an update is a HOT one on its own page: its WAL record
-- carries only the changed middle of the row, no index is touched, and the page
-- prunes the old version itself. A row is about as wide as its payload, so the new
-- version needs that much room: 50,000 events end to end with 1 KB payloads, all
-- updates were HOT at fillfactor 50, 54 % at 65, 25 % at 80; WAL per event 2.9 KB
-- against 4.5 KB before (scripts/bench-pg.sh). The heap grew 3 % (133 against
-- 129 MB): each event's update takes the room a non-HOT update took on another
-- page, and its dead version's room is reused on its own. What read the two
-- indexes:
-- - retention takes terminal events oldest first through events_created, passing
--   over the unfinished ones older than its cutoff (normally none: they are
--   younger than RETENTION_DAYS);
-- - the pending gauge counts events with an unfinished delivery, and the list of
--   pending or processing events finds them, through the deliveries' partial
--   indexes (src/store/postgres/claim.rs, `unfinished_sql`).
CREATE INDEX events_created ON events (created_at);
DROP INDEX events_active;
DROP INDEX events_terminal_created;
ALTER TABLE events SET (fillfactor = 50);
