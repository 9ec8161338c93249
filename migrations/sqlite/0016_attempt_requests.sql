-- What a transform made of an attempt's request (SPEC §12): its method, URL (without
-- credentials), headers and the first KB of its body, as JSON text; NULL when no
-- transform ran (the request was the standard one).
ALTER TABLE attempts ADD COLUMN request TEXT;
