-- offers_source_idx keeps only offers written for a feed source, all the freshness metrics read:
-- the operator's import (no source) then writes one index fewer per offer.
DROP INDEX `offers_source_idx`;--> statement-breakpoint
ALTER TABLE `offers` ADD `state_since` integer;--> statement-breakpoint
ALTER TABLE `offers` ADD `state_source_id` text;--> statement-breakpoint
CREATE INDEX `offers_source_idx` ON `offers` (`source_id`,`observed_at`) WHERE "offers"."source_id" IS NOT NULL;
--> statement-breakpoint
-- Price history no longer repeats each offer's current state: the offer holds it, with when
-- (`state_since`) and from which source it was first observed, and offer_price_history keeps only
-- the states it replaced. A new offer, the bulk of an import, then writes no history row at all.
-- An offer's newest history row is its current state: it moves onto the offer and leaves the table.
DROP TRIGGER `offers_price_history_insert`;
--> statement-breakpoint
DROP TRIGGER `offers_price_history_update`;
--> statement-breakpoint
UPDATE `offers` SET (`state_since`, `state_source_id`) = (
  SELECT `h`.`observed_at`, `h`.`source_id` FROM `offer_price_history` `h`
  WHERE `h`.`gtin` = `offers`.`gtin` AND `h`.`merchant_id` = `offers`.`merchant_id` ORDER BY `h`.`id` DESC LIMIT 1
);
--> statement-breakpoint
UPDATE `offers` SET `state_since` = `observed_at`, `state_source_id` = `source_id` WHERE `state_since` IS NULL;
--> statement-breakpoint
DELETE FROM `offer_price_history` WHERE `id` IN (SELECT max(`id`) FROM `offer_price_history` GROUP BY `gtin`, `merchant_id`)
  AND EXISTS (SELECT 1 FROM `offers` `o` WHERE `o`.`gtin` = `offer_price_history`.`gtin` AND `o`.`merchant_id` = `offer_price_history`.`merchant_id`);
--> statement-breakpoint
-- Whatever process writes the offer, an update that changes its price, currency, shipping or
-- availability keeps the state it replaces; the writer sets the new `state_since` (see the import upsert).
CREATE TRIGGER `offers_price_history` AFTER UPDATE ON `offers`
WHEN NEW.`price_amount` IS NOT OLD.`price_amount` OR NEW.`currency` IS NOT OLD.`currency`
  OR NEW.`shipping_amount` IS NOT OLD.`shipping_amount` OR NEW.`availability` IS NOT OLD.`availability`
BEGIN
  INSERT INTO `offer_price_history` (`gtin`, `merchant_id`, `price_amount`, `currency`, `shipping_amount`, `availability`, `observed_at`, `source_id`)
  VALUES (OLD.`gtin`, OLD.`merchant_id`, OLD.`price_amount`, OLD.`currency`, OLD.`shipping_amount`, OLD.`availability`, OLD.`state_since`, OLD.`state_source_id`);
END;
