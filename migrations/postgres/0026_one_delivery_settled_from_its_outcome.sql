-- An event with one delivery is settled from its outcome (issue 28, item 4).
--
-- hookbox_finish_attempts (0025) locked every event of a batch (a row lock: a WAL
-- record and a dirtied page each), then settled each from all its deliveries: an
-- index scan of the deliveries by event, an aggregate, and the update. Most events
-- have one delivery, and then the settle rule (0013) comes to that delivery's new
-- state: completed, failed, processing once an attempt ran, else pending; its
-- attempts and last error. So intake stores each event's number of deliveries
-- (`delivery_count`, fixed at insert: deliveries are only ever inserted with their
-- event), and an event with exactly one is updated from the outcome itself, in the
-- statement that records it, without the lock first. Events with several (or of
-- an unknown count: stored before this migration, NULL) are locked and settled
-- from all their deliveries as before.
--
-- Why the lock is not needed for one delivery: only the instance whose lease the
-- delivery carries records its outcome (`done` is empty for anyone else, and then
-- this call leaves the event alone), so no two calls settle the same one-delivery
-- event from outcomes; any other settle (hookbox_settle: replay, the API) takes
-- the event's row lock before the statement that reads the deliveries, so it either
-- waits for this transaction's commit and then reads the new state, or holds the
-- lock first and this update, which writes the delivery's final state and reads
-- nothing else, waits and lands after it.
--
-- One order of locks changes: for a one-delivery event this call now holds the
-- delivery's row before it updates the event's, where it used to lock the event
-- first. Retention's purge and an erasure delete the event first and its
-- deliveries after, so a purge or erasure of an event whose only delivery is being
-- recorded at that moment can meet this call in a deadlock, which PostgreSQL ends
-- by failing one of them: the outcome batch is then recorded one by one (the
-- deleted delivery records nothing), or the purge or erasure answers its error and
-- is tried again. Before, the outcome waited for the delete and found nothing.
--
-- The settle rule itself stays in one place: hookbox_event_status below is 0013's
-- CASE, which hookbox_settle_locked now calls with its aggregates over all of an
-- event's deliveries and this function with the one delivery's own state (an
-- IMMUTABLE one-expression SQL function, inlined by the planner).

CREATE FUNCTION hookbox_event_status(not_completed boolean, unfinished boolean,
                                     started boolean) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN not_completed IS NOT TRUE THEN 'completed'
        WHEN unfinished IS NOT TRUE THEN 'failed'
        WHEN started IS NOT TRUE THEN 'pending'
        ELSE 'processing' END
$$;

CREATE OR REPLACE FUNCTION hookbox_settle_locked(p_events uuid[]) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE events SET
        status = s.status,
        attempts = s.attempts,
        last_error = s.last_error,
        updated_at = now()
    FROM (
        SELECT ev.id,
            hookbox_event_status(a.not_completed, a.unfinished, a.started) AS status,
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

ALTER TABLE events ADD COLUMN delivery_count integer;

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
    p_a_body     text[],
    p_a_error    text[],
    p_a_request  text[]
) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    recorded  integer;
    unblocked boolean;
    nestloop  text := current_setting('enable_nestloop');
    shared    uuid[];
BEGIN
    -- The events whose status other deliveries share, locked in one order (by id).
    SELECT array_agg(id) INTO shared FROM (
        SELECT id FROM events
        WHERE id = ANY (p_events) AND delivery_count IS DISTINCT FROM 1
        ORDER BY id FOR UPDATE
    ) l;
    -- For this statement only (0025): a hash join, not a nested loop over the batch.
    PERFORM set_config('enable_nestloop', 'off', true);
    WITH v AS (
        SELECT * FROM unnest(p_ids, p_status, p_attempts, p_errors, p_retry,
                             p_a_handler, p_a_number, p_a_started, p_a_duration,
                             p_a_outcome, p_a_http, p_a_body, p_a_error, p_a_request)
            AS v (id, status, attempts, last_error, retry_after,
                  a_handler, a_number, a_started, a_duration, a_outcome, a_http, a_body, a_error,
                  a_request)
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
        RETURNING d.id, d.event_id, d.ordering_value, d.status, d.attempts, d.last_error
    ), logged AS (
        INSERT INTO attempts (event_id, handler, attempt, started_at, duration_ms, outcome,
                              response_status, response_body, error, request)
        SELECT done.event_id, v.a_handler, v.a_number, v.a_started, v.a_duration,
               v.a_outcome, v.a_http, v.a_body, v.a_error, v.a_request
        FROM done JOIN v ON v.id = done.id
        WHERE v.a_number IS NOT NULL
        ON CONFLICT DO NOTHING
    ), alone AS (
        -- The rule for an event whose only delivery is this one.
        UPDATE events e SET
            status = hookbox_event_status(done.status <> 'completed',
                                          done.status IN ('pending', 'processing'),
                                          done.status <> 'pending' OR done.attempts > 0),
            attempts = done.attempts,
            last_error = done.last_error,
            updated_at = now()
        FROM done
        WHERE e.id = ANY (p_events) AND e.id = done.event_id AND e.delivery_count = 1
    )
    SELECT count(*), COALESCE(bool_or(ordering_value IS NOT NULL AND status <> 'pending'), false)
        INTO recorded, unblocked FROM done;
    PERFORM set_config('enable_nestloop', nestloop, true);
    -- Locked above.
    IF shared IS NOT NULL THEN
        PERFORM hookbox_settle_locked(shared);
    END IF;
    IF unblocked THEN
        PERFORM pg_notify('hookbox_work', '');
    END IF;
    RETURN recorded;
END;
$$;
