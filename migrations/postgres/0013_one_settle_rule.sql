-- The settle rule in one place. Migration 0011 wrote hookbox_settle's statement
-- into hookbox_finish_attempts (to lock each batch's events once, not twice), so
-- the rule of an event's status lived in two functions. Now hookbox_settle_locked
-- holds it, for callers that hold the events' locks already; hookbox_settle takes
-- the locks and calls it, and hookbox_finish_attempts calls it under the lock it
-- took first. One more call per outcome batch, not per event: the same statements
-- run as before.
--
-- The rules are those of 0001: completed when no delivery is anything else (or
-- there is none), failed when none is pending or processing, pending when none ran
-- or is running, else processing.
CREATE FUNCTION hookbox_settle_locked(p_events uuid[]) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE events SET
        status = s.status,
        attempts = s.attempts,
        last_error = s.last_error,
        updated_at = now()
    FROM (
        SELECT ev.id,
            CASE
                WHEN a.not_completed IS NOT TRUE THEN 'completed'
                WHEN a.unfinished IS NOT TRUE THEN 'failed'
                WHEN a.started IS NOT TRUE THEN 'pending'
                ELSE 'processing' END AS status,
            COALESCE(a.attempts, 0) AS attempts,
            a.last_error
        FROM unnest(p_events) AS ev (id)
        CROSS JOIN LATERAL (
            SELECT bool_or(d.status <> 'completed') AS not_completed,
                   bool_or(d.status IN ('pending', 'processing')) AS unfinished,
                   bool_or(d.status <> 'pending' OR d.attempts > 0) AS started,
                   max(d.attempts) AS attempts,
                   (array_agg(d.last_error ORDER BY d.updated_at DESC)
                       FILTER (WHERE d.last_error IS NOT NULL))[1] AS last_error
            FROM deliveries d
            WHERE d.event_id = ev.id
        ) a
    ) s
    WHERE events.id = ANY (p_events) AND events.id = s.id;
END;
$$;

CREATE OR REPLACE FUNCTION hookbox_settle(p_events uuid[]) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM events WHERE id = ANY (p_events) ORDER BY id FOR UPDATE;
    PERFORM hookbox_settle_locked(p_events);
END;
$$;

CREATE OR REPLACE FUNCTION hookbox_finish_attempts(
    p_owner      text,
    p_ids        uuid[],
    p_events     uuid[],
    p_status     text[],
    p_attempts   integer[],
    p_errors     text[],
    p_retry      timestamptz[],
    p_a_handler  text[],
    p_a_number   integer[],
    p_a_started  timestamptz[],
    p_a_duration bigint[],
    p_a_outcome  text[],
    p_a_http     integer[],
    p_a_error    text[]
) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    recorded  integer;
    unblocked boolean;
BEGIN
    PERFORM 1 FROM events WHERE id = ANY (p_events) ORDER BY id FOR UPDATE;
    WITH v AS (
        SELECT * FROM unnest(p_ids, p_status, p_attempts, p_errors, p_retry,
                             p_a_handler, p_a_number, p_a_started, p_a_duration,
                             p_a_outcome, p_a_http, p_a_error)
            AS v (id, status, attempts, last_error, retry_after,
                  a_handler, a_number, a_started, a_duration, a_outcome, a_http, a_error)
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
        WHERE d.id = ANY (p_ids) AND d.id = v.id
          AND d.status = 'processing' AND d.locked_by = p_owner
        RETURNING d.id, d.event_id, d.ordering_value, d.status
    ), logged AS (
        INSERT INTO attempts (event_id, handler, attempt, started_at, duration_ms, outcome,
                              response_status, error)
        SELECT done.event_id, v.a_handler, v.a_number, v.a_started, v.a_duration,
               v.a_outcome, v.a_http, v.a_error
        FROM done JOIN v ON v.id = done.id
        WHERE v.a_number IS NOT NULL
        ON CONFLICT DO NOTHING
    )
    SELECT count(*), COALESCE(bool_or(ordering_value IS NOT NULL AND status <> 'pending'), false)
        INTO recorded, unblocked FROM done;
    -- The events are locked already.
    PERFORM hookbox_settle_locked(p_events);
    IF unblocked THEN
        PERFORM pg_notify('hookbox_work', '');
    END IF;
    RETURN recorded;
END;
$$;
