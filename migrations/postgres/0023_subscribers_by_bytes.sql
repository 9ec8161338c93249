-- Subscribers are listed by name in byte order, a page at a time (issue 27,
-- item 12), as on SQLite, whatever the database's collation: this index serves
-- `WHERE name COLLATE "C" > $1 ORDER BY name COLLATE "C" LIMIT $2` without sorting
-- every subscriber for each page.
CREATE INDEX subscribers_name_bytes ON subscribers (name COLLATE "C");
