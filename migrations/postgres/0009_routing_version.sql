-- A subscriber exists everywhere the moment it is created (issue 13, item 1).
--
-- Every instance routes new events with an in-memory copy of the subscribers.
-- hookbox_routing holds the version of the stored subscribers: every change to
-- them bumps it (in the changing transaction) and NOTIFYs hookbox_subscribers so
-- that the copies reload. Intake commits an event only if it was routed with the
-- version current at its commit (hookbox_routed_with); else it fails with SQLSTATE
-- HB001 and the instance reloads, routes again and retries.
--
-- "Current at its commit": a change takes the routing lock exclusively, intake
-- shares it (transaction-scoped advisory locks, no row written). A change waits for
-- the intake commits already under way, and intake waits for a change under way;
-- then it reads the version in a fresh snapshot (each statement of a volatile
-- PL/pgSQL function takes one), so it sees every change committed before it. No
-- subscriber table is needed for this on SQLite: one instance reloads its copy
-- before answering the change.
CREATE TABLE hookbox_routing (
    id      smallint PRIMARY KEY CHECK (id = 1),
    version bigint NOT NULL
);
INSERT INTO hookbox_routing (id, version) VALUES (1, 0);

-- The advisory lock key of routing (the bytes of "hookbox" as a number).
CREATE FUNCTION hookbox_routing_lock() RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$ SELECT 29395921911574392::bigint $$;

CREATE FUNCTION hookbox_subscribers_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hookbox_routing_lock());
    UPDATE hookbox_routing SET version = version + 1 WHERE id = 1;
    PERFORM pg_notify('hookbox_subscribers', '');
    RETURN NULL;
END;
$$;

CREATE TRIGGER subscribers_changed
    AFTER INSERT OR UPDATE OR DELETE ON subscribers
    FOR EACH STATEMENT EXECUTE FUNCTION hookbox_subscribers_changed();

-- True when the subscribers are still at p_version; raises HB001 when not. Holds
-- the routing lock shared until the calling transaction ends.
CREATE FUNCTION hookbox_routed_with(p_version bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    current bigint;
BEGIN
    PERFORM pg_advisory_xact_lock_shared(hookbox_routing_lock());
    SELECT version INTO current FROM hookbox_routing WHERE id = 1;
    IF current IS DISTINCT FROM p_version THEN
        RAISE EXCEPTION 'the subscribers changed: version % now, routed with %',
            current, p_version USING ERRCODE = 'HB001';
    END IF;
    RETURN true;
END;
$$;
