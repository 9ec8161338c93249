-- Recording a batch of outcomes took time quadratic in the batch's size.
--
-- hookbox_finish_attempts (0021) updates the batch's deliveries FROM the batch's
-- rows (a CTE over its arrays), joined on the delivery's id. Its plan is cached
-- generic: the planner takes an array's unnest for 10 rows and the instance's
-- leases (deliveries_leases, 0010) for 1, by the statistics of a table that was
-- idle when last analysed, and so chose a nested loop that scans the whole batch
-- once per delivery (auto_explain during `scripts/bench-pg.sh e2e`: 56 outcomes,
-- "Rows Removed by Join Filter: 3080", half of the update's 2.9 ms). A batch holds
-- up to 512 outcomes: 262,144 comparisons.
--
-- Without nested loops the same join is a hash join, linear in the batch; they are
-- turned off for that one statement. Tried and dropped: off for the whole function
-- (the settling's update then joined events to deliveries by hash, reading the
-- whole table: 229 ms a batch), and custom plans for every call (their planning
-- cost more than the quadratic join saved, 4.3 against 3.0 ms a batch of 43).

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
BEGIN
    PERFORM 1 FROM events WHERE id = ANY (p_events) ORDER BY id FOR UPDATE;
    -- For this statement only: see above.
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
        RETURNING d.id, d.event_id, d.ordering_value, d.status
    ), logged AS (
        INSERT INTO attempts (event_id, handler, attempt, started_at, duration_ms, outcome,
                              response_status, response_body, error, request)
        SELECT done.event_id, v.a_handler, v.a_number, v.a_started, v.a_duration,
               v.a_outcome, v.a_http, v.a_body, v.a_error, v.a_request
        FROM done JOIN v ON v.id = done.id
        WHERE v.a_number IS NOT NULL
        ON CONFLICT DO NOTHING
    )
    SELECT count(*), COALESCE(bool_or(ordering_value IS NOT NULL AND status <> 'pending'), false)
        INTO recorded, unblocked FROM done;
    PERFORM set_config('enable_nestloop', nestloop, true);
    -- The events are locked already.
    PERFORM hookbox_settle_locked(p_events);
    IF unblocked THEN
        PERFORM pg_notify('hookbox_work', '');
    END IF;
    RETURN recorded;
END;
$$;
