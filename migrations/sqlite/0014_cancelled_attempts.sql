-- A transform may cancel a delivery (SPEC §12): its attempt's outcome is
-- `cancelled`. SQLite cannot change a CHECK constraint in place, so the table is
-- rebuilt with the same columns and rows (this runs once, inside the migration's
-- transaction).
CREATE TABLE attempts_new (
    event_id        TEXT NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    handler         TEXT NOT NULL,
    attempt         INTEGER NOT NULL,
    started_at      TEXT NOT NULL,
    duration_ms     INTEGER NOT NULL,
    outcome         TEXT NOT NULL
                    CHECK (outcome IN ('completed', 'retry', 'dead_letter', 'cancelled')),
    response_status INTEGER,
    error           TEXT,
    response_body   TEXT,
    PRIMARY KEY (event_id, handler, attempt)
);
INSERT INTO attempts_new (event_id, handler, attempt, started_at, duration_ms, outcome,
                          response_status, error, response_body)
    SELECT event_id, handler, attempt, started_at, duration_ms, outcome,
           response_status, error, response_body
    FROM attempts;
DROP TABLE attempts;
ALTER TABLE attempts_new RENAME TO attempts;
