-- The claim query and the backlog count read due work only (src/store/postgres/
-- claim.rs). deliveries_claim held every unfinished delivery in seq order, so each
-- claim walked past every waiting retry (one dead subscriber with a long backoff
-- can leave thousands) before finding due work. It is replaced by:

-- fresh work: never tried (or replayed) pending deliveries, and processing ones
-- (leased or with an expired lease), in seq order;
CREATE INDEX deliveries_fresh ON deliveries (seq)
    WHERE status = 'processing' OR (status = 'pending' AND retry_after IS NULL);

-- retries by due time: the due ones are the range retry_after <= now().
CREATE INDEX deliveries_retry ON deliveries (retry_after)
    WHERE status = 'pending' AND retry_after IS NOT NULL;

DROP INDEX deliveries_claim;
