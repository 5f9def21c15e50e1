CREATE TABLE `api_key_monthly_usage` (
	`key_id` text NOT NULL,
	`month` text NOT NULL,
	`spent` integer DEFAULT 0 NOT NULL,
	PRIMARY KEY(`key_id`, `month`),
	FOREIGN KEY (`key_id`) REFERENCES `api_keys`(`id`) ON UPDATE no action ON DELETE no action
);
--> statement-breakpoint
ALTER TABLE `api_keys` ADD `expires_at` integer;--> statement-breakpoint
ALTER TABLE `api_keys` ADD `monthly_credit_limit` integer;--> statement-breakpoint
ALTER TABLE `api_keys` ADD `rate_limit` integer;