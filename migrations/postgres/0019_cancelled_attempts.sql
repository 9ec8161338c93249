-- A transform may cancel a delivery (SPEC §12): its attempt's outcome is
-- `cancelled`.
ALTER TABLE attempts DROP CONSTRAINT attempts_outcome_check;
ALTER TABLE attempts ADD CONSTRAINT attempts_outcome_check
    CHECK (outcome IN ('completed', 'retry', 'dead_letter', 'cancelled'));
