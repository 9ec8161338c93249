-- Pull sources (SPEC §7): each adapter's cursor, committed in the same transaction
-- as the events it covers. `cursor` is the JSON text of the last committed item's
-- cursor value (NULL: from the beginning); `version` grows with every commit and
-- every reset, so a commit made from a cursor that a reset has since moved is
-- refused instead of overwriting it.
CREATE TABLE source_cursors (
    source     TEXT PRIMARY KEY NOT NULL,
    cursor     TEXT,
    version    INTEGER NOT NULL DEFAULT 0,
    updated_at TEXT NOT NULL
);

-- The source's own sequence number and timestamp of a pulled event, when it gives
-- them (arrival order is not business order).
ALTER TABLE events ADD COLUMN source_sequence INTEGER;
ALTER TABLE events ADD COLUMN source_emitted_at TEXT;
