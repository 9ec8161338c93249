-- Issue 28, item 4: does a narrow event-state table beat today's HOT update of the
-- events row? Both shapes take the same 20,000 events (1 KB payloads), 400 batches
-- of 50, interleaved batch by batch: A inserts into a copy of `events` (fillfactor
-- 50, as migration 0024 left it) and settles each batch five batches later (the
-- row locks, then status, attempts and updated_at: a HOT update); B inserts an
-- events row that is never updated (fillfactor 100) plus a narrow state row, and
-- settles the state row. Each statement runs under EXPLAIN (ANALYZE, WAL), so the
-- WAL bytes are the statement's own, whatever else the server is doing. Prints
-- WAL bytes per event and execution time for each, and the tables' pages and HOT
-- updates.
--
-- Run on a scratch database that `hookbox migrate` made (it copies the `events`
-- table's shape and touches no hookbox table; its own tables are dropped at the
-- end):
--   psql postgres://postgres@127.0.0.1:5432/scratch -q -f scripts/pg-event-state.sql
DROP TABLE IF EXISTS bench_events_a, bench_events_b, bench_event_state;
-- A: today's events table (migration 0024: fillfactor 50, HOT status updates).
CREATE TABLE bench_events_a (LIKE events INCLUDING ALL) WITH (fillfactor = 50);
-- B: the same row never updated, and the state beside it in a narrow table.
CREATE TABLE bench_events_b (LIKE events INCLUDING ALL) WITH (fillfactor = 100);
CREATE TABLE bench_event_state (
    id uuid PRIMARY KEY, status text NOT NULL, attempts integer NOT NULL DEFAULT 0,
    last_error text, updated_at timestamptz NOT NULL) WITH (fillfactor = 50);
CREATE FUNCTION pg_temp.bench_wal(q text, OUT bytes bigint, OUT ms float8) LANGUAGE plpgsql AS $$
DECLARE p json;
BEGIN
  EXECUTE 'EXPLAIN (ANALYZE, WAL, TIMING OFF, FORMAT JSON) ' || q INTO p;
  bytes := (p->0->'Plan'->>'WAL Bytes')::bigint;
  ms := (p->0->>'Execution Time')::float8;
END $$;
CREATE FUNCTION pg_temp.ids(k int) RETURNS uuid[] LANGUAGE sql AS $$
  SELECT array_agg(lpad(to_hex(n), 32, '0')::uuid ORDER BY n) FROM generate_series(k*50, k*50+49) n $$;
DO $$
DECLARE
  k int; r record;
  a_ins bigint := 0; a_set bigint := 0; b_ins bigint := 0; b_set bigint := 0;
  a_ins_ms float8 := 0; a_set_ms float8 := 0; b_ins_ms float8 := 0; b_set_ms float8 := 0;
  ins text := 'INSERT INTO %s (id, idempotency_key, event_type, payload, payload_sha256, status, created_at, updated_at)
     SELECT lpad(to_hex(n), 32, ''0'')::uuid, ''loadgen-run-'' || n, ''bench.e2e'',
            ''{"source":"hookbox-loadgen","run_id":"r","padding":"'' || repeat(''x'', 970) || ''"}'',
            md5(n::text) || md5((n+1)::text), ''pending'', now(), now()
     FROM generate_series(%s, %s) n';
BEGIN
  FOR k IN 0..399 LOOP
    -- A: the events row carries the state (today's schema).
    SELECT * INTO r FROM pg_temp.bench_wal(format(ins, 'bench_events_a', k*50, k*50+49));
    a_ins := a_ins + r.bytes; a_ins_ms := a_ins_ms + r.ms;
    IF k >= 5 THEN
      SELECT * INTO r FROM pg_temp.bench_wal(format('SELECT 1 FROM bench_events_a WHERE id = ANY (%L::uuid[]) ORDER BY id FOR UPDATE', pg_temp.ids(k-5)));
      a_set := a_set + r.bytes; a_set_ms := a_set_ms + r.ms;
      SELECT * INTO r FROM pg_temp.bench_wal(format('UPDATE bench_events_a SET status = ''completed'', attempts = 1, updated_at = now() WHERE id = ANY (%L::uuid[])', pg_temp.ids(k-5)));
      a_set := a_set + r.bytes; a_set_ms := a_set_ms + r.ms;
    END IF;
    -- B: an insert-only events row and a narrow state row.
    SELECT * INTO r FROM pg_temp.bench_wal(format(ins, 'bench_events_b', k*50, k*50+49));
    b_ins := b_ins + r.bytes; b_ins_ms := b_ins_ms + r.ms;
    SELECT * INTO r FROM pg_temp.bench_wal(format('INSERT INTO bench_event_state (id, status, updated_at) SELECT lpad(to_hex(n), 32, ''0'')::uuid, ''pending'', now() FROM generate_series(%s, %s) n', k*50, k*50+49));
    b_ins := b_ins + r.bytes; b_ins_ms := b_ins_ms + r.ms;
    IF k >= 5 THEN
      SELECT * INTO r FROM pg_temp.bench_wal(format('SELECT 1 FROM bench_event_state WHERE id = ANY (%L::uuid[]) ORDER BY id FOR UPDATE', pg_temp.ids(k-5)));
      b_set := b_set + r.bytes; b_set_ms := b_set_ms + r.ms;
      SELECT * INTO r FROM pg_temp.bench_wal(format('UPDATE bench_event_state SET status = ''completed'', attempts = 1, updated_at = now() WHERE id = ANY (%L::uuid[])', pg_temp.ids(k-5)));
      b_set := b_set + r.bytes; b_set_ms := b_set_ms + r.ms;
    END IF;
  END LOOP;
  RAISE NOTICE 'A (state in events): insert % B per event, % ms; settle % B per settled event, % ms', a_ins/20000, a_ins_ms, a_set/19750, a_set_ms;
  RAISE NOTICE 'B (narrow state):    insert % B per event, % ms; settle % B per settled event, % ms', b_ins/20000, b_ins_ms, b_set/19750, b_set_ms;
  RAISE NOTICE 'totals: A % B/event % ms, B % B/event % ms', (a_ins+a_set)/20000, a_ins_ms+a_set_ms, (b_ins+b_set)/20000, b_ins_ms+b_set_ms;
END $$;
SELECT relname, pg_relation_size(relid) / 8192 AS pages, n_tup_hot_upd, n_tup_upd
FROM pg_stat_user_tables WHERE relname LIKE 'bench_event%' ORDER BY relname;
DROP TABLE bench_events_a, bench_events_b, bench_event_state;
