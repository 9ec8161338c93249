-- Transforms (SPEC §12): a subscriber's JavaScript source; NULL when it has none.
ALTER TABLE subscribers ADD COLUMN transform text;
