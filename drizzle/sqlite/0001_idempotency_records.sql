CREATE TABLE `idempotency_records` (
	`scope` text NOT NULL,
	`key_hash` text NOT NULL,
	`request_hash` text NOT NULL,
	`status` text NOT NULL,
	`response_status` integer,
	`response_body` text,
	`created_at` integer NOT NULL,
	`expires_at` integer NOT NULL,
	PRIMARY KEY(`scope`, `key_hash`)
);
--> statement-breakpoint
CREATE INDEX `idempotency_records_expires_idx` ON `idempotency_records` (`expires_at`);