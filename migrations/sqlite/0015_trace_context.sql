-- W3C Trace Context (SPEC §13): the event's `traceparent` (hookbox's intake span
-- in the sender's trace, or a new trace) and the sender's `tracestate`; each
-- attempt is a child span of it. NULL for events stored before this migration.
ALTER TABLE events ADD COLUMN traceparent TEXT;
ALTER TABLE events ADD COLUMN tracestate TEXT;
