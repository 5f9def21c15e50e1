CREATE TABLE `price_watches` (
	`id` text PRIMARY KEY NOT NULL,
	`organization_id` text NOT NULL,
	`gtin` text NOT NULL,
	`merchant_id` text,
	`trigger` text NOT NULL,
	`below_amount` integer,
	`below_currency` text,
	`status` text NOT NULL,
	`paused_reason` text,
	`armed` integer NOT NULL,
	`last_merchant_id` text,
	`last_price` integer,
	`last_currency` text,
	`last_availability` text,
	`last_observed_at` integer,
	`created_at` integer NOT NULL,
	`last_triggered_at` integer,
	FOREIGN KEY (`organization_id`) REFERENCES `organizations`(`id`) ON UPDATE no action ON DELETE no action
);
--> statement-breakpoint
CREATE INDEX `price_watches_organization_idx` ON `price_watches` (`organization_id`,`id`);--> statement-breakpoint
CREATE INDEX `price_watches_gtin_idx` ON `price_watches` (`gtin`);--> statement-breakpoint
CREATE INDEX `price_watches_paused_idx` ON `price_watches` (`organization_id`) WHERE status = 'paused';--> statement-breakpoint
CREATE TABLE `watch_changes` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`gtin` text NOT NULL
);
--> statement-breakpoint
-- A watched product whose offers change is queued for the watch evaluator, whatever process writes
-- the offer: a new offer, or an update that changes its price, currency, shipping or availability.
-- An unwatched product costs one index probe; an identical repeat queues nothing.
CREATE TRIGGER `offers_watch_insert` AFTER INSERT ON `offers`
WHEN EXISTS (SELECT 1 FROM `price_watches` WHERE `gtin` = NEW.`gtin`)
BEGIN
  INSERT INTO `watch_changes` (`gtin`) VALUES (NEW.`gtin`);
END;
--> statement-breakpoint
CREATE TRIGGER `offers_watch_update` AFTER UPDATE ON `offers`
WHEN (NEW.`price_amount` IS NOT OLD.`price_amount` OR NEW.`currency` IS NOT OLD.`currency`
  OR NEW.`shipping_amount` IS NOT OLD.`shipping_amount` OR NEW.`availability` IS NOT OLD.`availability`)
  AND EXISTS (SELECT 1 FROM `price_watches` WHERE `gtin` = NEW.`gtin`)
BEGIN
  INSERT INTO `watch_changes` (`gtin`) VALUES (NEW.`gtin`);
END;
