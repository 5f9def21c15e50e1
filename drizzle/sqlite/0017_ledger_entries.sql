ALTER TABLE `credit_transactions` ADD `look_ups` text;--> statement-breakpoint
ALTER TABLE `credit_transactions` ADD `first_created_at` integer;--> statement-breakpoint
-- Every ledger entry, one row each: the same view as PostgreSQL's, where settled usage rows pack look-ups.
CREATE VIEW `ledger_entries` AS
  SELECT `id`, `organization_id`, `type`, `amount`, `balance_after`, `bucket_id`, `key_id`, `request_id`, `gtin`, `description`, `created_at`
  FROM `credit_transactions`;
