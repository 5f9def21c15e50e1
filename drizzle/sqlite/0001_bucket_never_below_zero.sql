-- The database itself refuses a credit bucket below zero, whichever process writes the file (the
-- PostgreSQL schema has the CHECK constraint credit_buckets_remaining_not_negative). SQLite cannot add
-- a CHECK to an existing table without rebuilding it, and payments references it: triggers do the same.
CREATE TRIGGER `credit_buckets_remaining_not_negative_insert` BEFORE INSERT ON `credit_buckets`
WHEN NEW.`remaining` < 0
BEGIN
  SELECT RAISE(ABORT, 'CHECK constraint failed: credit_buckets_remaining_not_negative');
END;
--> statement-breakpoint
CREATE TRIGGER `credit_buckets_remaining_not_negative_update` BEFORE UPDATE OF `remaining` ON `credit_buckets`
WHEN NEW.`remaining` < 0
BEGIN
  SELECT RAISE(ABORT, 'CHECK constraint failed: credit_buckets_remaining_not_negative');
END;
