CREATE TABLE `usage_counters` (
	`organization_id` text NOT NULL,
	`period_ms` integer NOT NULL,
	`period_start` integer NOT NULL,
	`key_id` text NOT NULL,
	`reason` text NOT NULL,
	`requests` integer DEFAULT 0 NOT NULL,
	`credits` integer DEFAULT 0 NOT NULL,
	PRIMARY KEY(`organization_id`, `period_ms`, `period_start`, `key_id`, `reason`)
);
