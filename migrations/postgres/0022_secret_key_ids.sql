-- Subscriber secrets sealed at rest (SPEC section 14): the id of the key that
-- sealed secret; NULL when it is stored in the clear (no ENCRYPTION_KEY).
ALTER TABLE subscribers ADD COLUMN secret_key_id TEXT;
