CREATE TABLE `webhook_deliveries` (
	`endpoint_id` text NOT NULL,
	`event_id` text NOT NULL,
	`state` text DEFAULT 'pending' NOT NULL,
	`attempts` integer DEFAULT 0 NOT NULL,
	`last_status` integer,
	`last_response` text,
	`last_attempt_at` integer,
	`next_attempt_at` integer,
	`lease_owner` text,
	`lease_until` integer,
	`created_at` integer NOT NULL,
	PRIMARY KEY(`endpoint_id`, `event_id`),
	FOREIGN KEY (`endpoint_id`) REFERENCES `webhook_endpoints`(`id`) ON UPDATE no action ON DELETE cascade,
	FOREIGN KEY (`event_id`) REFERENCES `webhook_events`(`id`) ON UPDATE no action ON DELETE no action
);
--> statement-breakpoint
CREATE INDEX `webhook_deliveries_due_idx` ON `webhook_deliveries` (`next_attempt_at`) WHERE state = 'pending';--> statement-breakpoint
CREATE INDEX `webhook_deliveries_log_idx` ON `webhook_deliveries` (`endpoint_id`,`created_at`,`event_id`);--> statement-breakpoint
CREATE TABLE `webhook_endpoints` (
	`id` text PRIMARY KEY NOT NULL,
	`organization_id` text NOT NULL,
	`url` text NOT NULL,
	`event_types` text NOT NULL,
	`secret` text NOT NULL,
	`previous_secret` text,
	`previous_secret_expires_at` integer,
	`status` text DEFAULT 'enabled' NOT NULL,
	`failing_since` integer,
	`disabled_at` integer,
	`created_at` integer NOT NULL,
	FOREIGN KEY (`organization_id`) REFERENCES `organizations`(`id`) ON UPDATE no action ON DELETE no action
);
--> statement-breakpoint
CREATE INDEX `webhook_endpoints_organization_idx` ON `webhook_endpoints` (`organization_id`,`id`);--> statement-breakpoint
CREATE TABLE `webhook_events` (
	`id` text PRIMARY KEY NOT NULL,
	`organization_id` text NOT NULL,
	`type` text NOT NULL,
	`payload` text NOT NULL,
	`created_at` integer NOT NULL
);
--> statement-breakpoint
CREATE INDEX `webhook_events_organization_idx` ON `webhook_events` (`organization_id`,`created_at`);--> statement-breakpoint
ALTER TABLE `organizations` ADD `low_credit_threshold` integer;