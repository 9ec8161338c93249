-- Pull sources (SPEC §7): each adapter's cursor, committed in the same transaction
-- as the events it covers. `cursor` is the JSON text of the last committed item's
-- cursor value (NULL: from the beginning); `version` grows with every commit and
-- every reset, so a commit made from a cursor that a reset has since moved is
-- refused instead of overwriting it. Which instance runs a source's adapter is
-- decided by a session advisory lock, not by a column here.
CREATE TABLE source_cursors (
    source     text PRIMARY KEY,
    cursor     text,
    version    bigint NOT NULL DEFAULT 0,
    updated_at timestamptz NOT NULL
);

-- The source's own sequence number and timestamp of a pulled event, when it gives
-- them (arrival order is not business order). Nullable columns rewrite no row.
ALTER TABLE events ADD COLUMN source_sequence bigint;
ALTER TABLE events ADD COLUMN source_emitted_at timestamptz;
