-- Retention deletes terminal events created before a cutoff, oldest first, a batch
-- at a time. With events_status_created alone, `status IN ('completed', 'failed')`
-- spans two ranges of that index, so each batch sorted every expired row to find
-- its oldest thousand (quadratic over a purge, stalling the single writer). This
-- index holds only terminal events, in creation order: a batch reads its rows and
-- stops. The purge names it (INDEXED BY), so the plan cannot silently change.
CREATE INDEX events_terminal_created ON events (created_at)
    WHERE status IN ('completed', 'failed');
