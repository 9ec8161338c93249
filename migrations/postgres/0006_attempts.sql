-- Attempt history (SPEC §2, GET /webhooks/{id}/attempts): one row per attempt of
-- every delivery, written in the same commit as the delivery's outcome and deleted
-- with its event (by cascade, when retention deletes the event). A delivery is its
-- event's one for a handler, so (event_id, handler, attempt) names an attempt; an
-- attempt recorded twice (at-least-once) is kept once.
CREATE TABLE attempts (
    event_id        uuid NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    handler         text NOT NULL,
    attempt         integer NOT NULL,
    started_at      timestamptz NOT NULL,
    duration_ms     bigint NOT NULL,
    outcome         text NOT NULL CHECK (outcome IN ('completed', 'retry', 'dead_letter')),
    response_status integer,
    error           text,
    PRIMARY KEY (event_id, handler, attempt)
);

-- hookbox_finish (migration 0001) with the attempts: records attempt outcomes, the
-- attempt rows of the deliveries it updated (same transaction), and settles their
-- events, in one round trip. The p_a_* arrays run parallel to p_ids; a NULL
-- p_a_number means no attempt ran (nothing is added to the history).
--
-- As in hookbox_finish, only deliveries still claimed by `p_owner` are updated, and
-- only their attempts are kept: an instance whose lease expired records nothing
-- (the instance that took the delivery over runs and records that attempt).
-- hookbox_finish stays for instances of the previous version during an upgrade.
CREATE FUNCTION hookbox_finish_attempts(
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
        WHERE d.id = v.id AND d.status = 'processing' AND d.locked_by = p_owner
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
    PERFORM hookbox_settle(p_events);
    IF unblocked THEN
        PERFORM pg_notify('hookbox_work', '');
    END IF;
    RETURN recorded;
END;
$$;
