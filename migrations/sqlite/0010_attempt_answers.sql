-- What the receiver said (issue 23): the first KB of every http answer's body,
-- success or not, beside its status in the attempt history.
ALTER TABLE attempts ADD COLUMN response_body TEXT;
