-- Attempt history (SPEC §2, GET /webhooks/{id}/attempts): one row per attempt of
-- every delivery, written in the same commit as the delivery's outcome and deleted
-- with its event (by cascade, when retention deletes the event). A delivery is its
-- event's one for a handler, so (event_id, handler, attempt) names an attempt; an
-- attempt recorded twice (at-least-once) is kept once.
CREATE TABLE attempts (
    event_id        TEXT NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    handler         TEXT NOT NULL,
    attempt         INTEGER NOT NULL,
    started_at      TEXT NOT NULL,
    duration_ms     INTEGER NOT NULL,
    outcome         TEXT NOT NULL CHECK (outcome IN ('completed', 'retry', 'dead_letter')),
    response_status INTEGER,
    error           TEXT,
    PRIMARY KEY (event_id, handler, attempt)
);
