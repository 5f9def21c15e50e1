CREATE TABLE `feed_runs` (
	`id` text PRIMARY KEY NOT NULL,
	`source_id` text NOT NULL,
	`trigger` text NOT NULL,
	`status` text NOT NULL,
	`started_at` integer NOT NULL,
	`duration_ms` integer NOT NULL,
	`file` text,
	`http_status` integer,
	`attempts` integer NOT NULL,
	`records_read` integer NOT NULL,
	`products` integer NOT NULL,
	`offers` integer NOT NULL,
	`rejected_count` integer NOT NULL,
	`rejected` text NOT NULL,
	`error` text,
	FOREIGN KEY (`source_id`) REFERENCES `feed_sources`(`id`) ON UPDATE no action ON DELETE no action
);
--> statement-breakpoint
CREATE INDEX `feed_runs_source_idx` ON `feed_runs` (`source_id`,`id`);--> statement-breakpoint
CREATE TABLE `feed_source_files` (
	`source_id` text NOT NULL,
	`name` text NOT NULL,
	`size` integer NOT NULL,
	`modified_at` integer NOT NULL,
	`run_id` text NOT NULL,
	PRIMARY KEY(`source_id`, `name`, `size`, `modified_at`),
	FOREIGN KEY (`source_id`) REFERENCES `feed_sources`(`id`) ON UPDATE no action ON DELETE no action
);
--> statement-breakpoint
CREATE TABLE `feed_sources` (
	`id` text PRIMARY KEY NOT NULL,
	`name` text NOT NULL,
	`kind` text NOT NULL,
	`location` text,
	`format` text,
	`interval_ms` integer,
	`timeout_ms` integer NOT NULL,
	`retries` integer NOT NULL,
	`etag` text,
	`last_modified` text,
	`next_run_at` integer,
	`lease_owner` text,
	`lease_until` integer,
	`last_run_at` integer,
	`last_success_at` integer,
	`created_at` integer NOT NULL,
	`removed_at` integer
);
--> statement-breakpoint
CREATE UNIQUE INDEX `feed_sources_name_unique` ON `feed_sources` (`name`);--> statement-breakpoint
CREATE INDEX `feed_sources_due_idx` ON `feed_sources` (`next_run_at`);--> statement-breakpoint
CREATE TABLE `feed_tokens` (
	`id` text PRIMARY KEY NOT NULL,
	`source_id` text,
	`scope` text NOT NULL,
	`name` text NOT NULL,
	`secret_hash` text NOT NULL,
	`created_at` integer NOT NULL,
	`revoked_at` integer,
	`last_used_at` integer,
	FOREIGN KEY (`source_id`) REFERENCES `feed_sources`(`id`) ON UPDATE no action ON DELETE no action
);
--> statement-breakpoint
CREATE INDEX `feed_tokens_source_idx` ON `feed_tokens` (`source_id`);--> statement-breakpoint
CREATE TABLE `offer_price_history` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`gtin` text NOT NULL,
	`merchant_id` text NOT NULL,
	`price_amount` integer NOT NULL,
	`currency` text NOT NULL,
	`shipping_amount` integer,
	`availability` text NOT NULL,
	`observed_at` integer NOT NULL,
	`source_id` text
);
--> statement-breakpoint
CREATE INDEX `offer_price_history_offer_idx` ON `offer_price_history` (`gtin`,`merchant_id`,`observed_at`);--> statement-breakpoint
CREATE INDEX `offer_price_history_observed_idx` ON `offer_price_history` (`observed_at`);--> statement-breakpoint
ALTER TABLE `offers` ADD `source_id` text;--> statement-breakpoint
CREATE INDEX `offers_source_idx` ON `offers` (`source_id`,`observed_at`);