-- The same schema as migrations/sqlite, in PostgreSQL types, plus what several
-- instances sharing this database need: a claim lease on deliveries
-- (locked_until, locked_by) and a sequence that orders them across instances.

-- Events: one row per accepted webhook. Ids are UUID v7 (they sort by time).
-- The payload is the canonical JSON text stored by intake (text, not jsonb, so it
-- is handed to handlers byte for byte as it was fingerprinted).
CREATE TABLE events (
    id              uuid PRIMARY KEY,
    idempotency_key text NOT NULL UNIQUE,
    event_type      text NOT NULL,
    payload         text NOT NULL,
    payload_sha256  text NOT NULL,
    status          text NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'processing', 'completed', 'failed')),
    attempts        integer NOT NULL DEFAULT 0,
    last_error      text,
    retry_after     timestamptz,
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL
);

CREATE INDEX events_status_created ON events (status, created_at);
CREATE INDEX events_type_id ON events (event_type, id);

-- Deliveries: one row per event x matching handler, with the same lifecycle.
-- `seq` is assigned by the database at insert: it orders deliveries across
-- instances (created_at has millisecond resolution and comes from each instance's
-- clock, so two events accepted in one millisecond on two instances would tie).
CREATE TABLE deliveries (
    id             uuid PRIMARY KEY,
    seq            bigint GENERATED ALWAYS AS IDENTITY,
    event_id       uuid NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    handler        text NOT NULL,
    ordering_value text,
    status         text NOT NULL DEFAULT 'pending'
                   CHECK (status IN ('pending', 'processing', 'completed', 'failed')),
    attempts       integer NOT NULL DEFAULT 0,
    last_error     text,
    retry_after    timestamptz,
    -- The claim: which instance runs it, and until when its lease holds.
    locked_until   timestamptz,
    locked_by      text,
    created_at     timestamptz NOT NULL,
    updated_at     timestamptz NOT NULL,
    UNIQUE (event_id, handler)
);

-- The claim query walks unfinished deliveries oldest first.
CREATE INDEX deliveries_claim ON deliveries (seq)
    WHERE status IN ('pending', 'processing');
-- Strict ordering: "is an older delivery of this handler and key value unfinished?"
CREATE INDEX deliveries_ordering ON deliveries (handler, ordering_value, seq)
    WHERE ordering_value IS NOT NULL AND status IN ('pending', 'processing');
-- Lease renewal and release: the deliveries one instance holds.
CREATE INDEX deliveries_locked ON deliveries (locked_by)
    WHERE status = 'processing';
-- Dead letters and the gauges.
CREATE INDEX deliveries_status ON deliveries (status, retry_after);

-- Derives each event's status from its deliveries (SPEC §3), as the SQLite writer
-- does: `completed` when all are (or there are none); `failed` when one is
-- dead-lettered and none is still pending or processing; `pending` while nothing
-- was tried yet; else `processing`.
--
-- The events are locked first (in id order, so concurrent callers cannot
-- deadlock): two deliveries of one event finishing at once on two instances would
-- otherwise each settle the event from a snapshot without the other's outcome and
-- leave it `processing` forever. Every statement of a volatile PL/pgSQL function
-- takes a fresh snapshot, so the UPDATE sees every outcome committed before the
-- lock was granted.
CREATE FUNCTION hookbox_settle(p_events uuid[]) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM events WHERE id = ANY (p_events) ORDER BY id FOR UPDATE;
    UPDATE events SET
        status = CASE
            WHEN NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = events.id
                             AND d.status <> 'completed') THEN 'completed'
            WHEN NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = events.id
                             AND d.status IN ('pending', 'processing')) THEN 'failed'
            WHEN NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = events.id
                             AND (d.status <> 'pending' OR d.attempts > 0)) THEN 'pending'
            ELSE 'processing' END,
        attempts = COALESCE((SELECT MAX(d.attempts) FROM deliveries d
                             WHERE d.event_id = events.id), 0),
        last_error = (SELECT d.last_error FROM deliveries d WHERE d.event_id = events.id
                      AND d.last_error IS NOT NULL ORDER BY d.updated_at DESC LIMIT 1),
        updated_at = now()
    WHERE id = ANY (p_events);
END;
$$;

-- Records attempt outcomes and settles their events, in one round trip. The
-- events are locked first, as in hookbox_settle, and for the same reason.
--
-- Only deliveries still claimed by `p_owner` are updated: an instance whose lease
-- expired (another instance took the delivery over) records nothing. Returns how
-- many were recorded. A finished ordered delivery may unblock the next one of its
-- key, so it wakes the claimers.
CREATE FUNCTION hookbox_finish(
    p_owner    text,
    p_ids      uuid[],
    p_events   uuid[],
    p_status   text[],
    p_attempts integer[],
    p_errors   text[],
    p_retry    timestamptz[]
) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    recorded  integer;
    unblocked boolean;
BEGIN
    PERFORM 1 FROM events WHERE id = ANY (p_events) ORDER BY id FOR UPDATE;
    WITH v AS (
        SELECT * FROM unnest(p_ids, p_status, p_attempts, p_errors, p_retry)
            AS v (id, status, attempts, last_error, retry_after)
    ), done AS (
        UPDATE deliveries d SET
            status = v.status,
            attempts = v.attempts,
            last_error = COALESCE(v.last_error, d.last_error),
            retry_after = v.retry_after,
            locked_until = NULL,
            locked_by = NULL,
            updated_at = now()
        FROM v
        WHERE d.id = v.id AND d.status = 'processing' AND d.locked_by = p_owner
        RETURNING d.ordering_value, d.status
    )
    SELECT count(*), COALESCE(bool_or(ordering_value IS NOT NULL AND status <> 'pending'), false)
        INTO recorded, unblocked FROM done;
    PERFORM hookbox_settle(p_events);
    IF unblocked THEN
        PERFORM pg_notify('hookbox_work', '');
    END IF;
    RETURN recorded;
END;
$$;
