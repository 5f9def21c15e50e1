CREATE TABLE `invoices` (
	`id` text PRIMARY KEY NOT NULL,
	`organization_id` text NOT NULL,
	`sequence` integer NOT NULL,
	`number` text NOT NULL,
	`status` text NOT NULL,
	`amount` integer NOT NULL,
	`currency` text NOT NULL,
	`description` text NOT NULL,
	`order_id` text,
	`subscription_id` text,
	`period_start` integer,
	`period_end` integer,
	`created_at` integer NOT NULL,
	`paid_at` integer,
	FOREIGN KEY (`organization_id`) REFERENCES `organizations`(`id`) ON UPDATE no action ON DELETE no action
);
--> statement-breakpoint
CREATE UNIQUE INDEX `invoices_sequence_unique` ON `invoices` (`sequence`);--> statement-breakpoint
CREATE UNIQUE INDEX `invoices_number_unique` ON `invoices` (`number`);--> statement-breakpoint
CREATE INDEX `invoices_org_idx` ON `invoices` (`organization_id`,`id`);--> statement-breakpoint
CREATE TABLE `orders` (
	`id` text PRIMARY KEY NOT NULL,
	`organization_id` text NOT NULL,
	`user_id` text,
	`kind` text NOT NULL,
	`item_id` text NOT NULL,
	`item_name` text NOT NULL,
	`credits` integer NOT NULL,
	`interval` text,
	`validity_days` integer,
	`amount` integer NOT NULL,
	`currency` text NOT NULL,
	`status` text NOT NULL,
	`provider` text NOT NULL,
	`provider_ref` text,
	`success_url` text,
	`cancel_url` text,
	`created_at` integer NOT NULL,
	`completed_at` integer,
	FOREIGN KEY (`organization_id`) REFERENCES `organizations`(`id`) ON UPDATE no action ON DELETE no action
);
--> statement-breakpoint
CREATE INDEX `orders_org_idx` ON `orders` (`organization_id`,`id`);--> statement-breakpoint
CREATE UNIQUE INDEX `orders_provider_ref_unique` ON `orders` (`provider_ref`);--> statement-breakpoint
CREATE TABLE `payments` (
	`ref` text PRIMARY KEY NOT NULL,
	`organization_id` text NOT NULL,
	`bucket_id` text NOT NULL,
	`credits` integer NOT NULL,
	`amount` integer NOT NULL,
	`currency` text NOT NULL,
	`refunded_amount` integer DEFAULT 0 NOT NULL,
	`refunded_credits` integer DEFAULT 0 NOT NULL,
	`created_at` integer NOT NULL,
	FOREIGN KEY (`organization_id`) REFERENCES `organizations`(`id`) ON UPDATE no action ON DELETE no action,
	FOREIGN KEY (`bucket_id`) REFERENCES `credit_buckets`(`id`) ON UPDATE no action ON DELETE no action
);
--> statement-breakpoint
CREATE TABLE `provider_events` (
	`id` text PRIMARY KEY NOT NULL,
	`type` text NOT NULL,
	`received_at` integer NOT NULL
);
--> statement-breakpoint
CREATE TABLE `subscriptions` (
	`id` text PRIMARY KEY NOT NULL,
	`organization_id` text NOT NULL,
	`order_id` text NOT NULL,
	`plan_id` text NOT NULL,
	`plan_name` text NOT NULL,
	`credits_per_period` integer NOT NULL,
	`interval` text NOT NULL,
	`amount` integer NOT NULL,
	`currency` text NOT NULL,
	`status` text NOT NULL,
	`started_at` integer NOT NULL,
	`current_period_start` integer NOT NULL,
	`current_period_end` integer NOT NULL,
	`canceled_at` integer,
	`created_at` integer NOT NULL,
	FOREIGN KEY (`organization_id`) REFERENCES `organizations`(`id`) ON UPDATE no action ON DELETE no action,
	FOREIGN KEY (`order_id`) REFERENCES `orders`(`id`) ON UPDATE no action ON DELETE no action
);
--> statement-breakpoint
CREATE UNIQUE INDEX `subscriptions_order_unique` ON `subscriptions` (`order_id`);--> statement-breakpoint
CREATE INDEX `subscriptions_org_idx` ON `subscriptions` (`organization_id`,`id`);--> statement-breakpoint
CREATE INDEX `subscriptions_due_idx` ON `subscriptions` (`status`,`current_period_end`);--> statement-breakpoint
DROP INDEX `credit_transactions_org_id_idx`;--> statement-breakpoint
DROP INDEX `credit_transactions_org_type_id_idx`;--> statement-breakpoint
CREATE INDEX `credit_transactions_org_created_idx` ON `credit_transactions` (`organization_id`,`created_at`,`id`);--> statement-breakpoint
CREATE INDEX `credit_transactions_org_type_created_idx` ON `credit_transactions` (`organization_id`,`type`,`created_at`,`id`);--> statement-breakpoint
CREATE UNIQUE INDEX `organizations_stripe_customer_unique` ON `organizations` (`stripe_customer_id`);