-- Price history is written by the database itself, so every writer (serve's push and pulls, the
-- operator's `import`, demo data) keeps it alike: an offer's first observation, then each change of
-- its price, currency, shipping or availability. An identical repeat, or an older observation that
-- the upsert does not apply, writes nothing.
CREATE TRIGGER `offers_price_history_insert` AFTER INSERT ON `offers`
BEGIN
  INSERT INTO `offer_price_history` (`gtin`, `merchant_id`, `price_amount`, `currency`, `shipping_amount`, `availability`, `observed_at`, `source_id`)
  VALUES (NEW.`gtin`, NEW.`merchant_id`, NEW.`price_amount`, NEW.`currency`, NEW.`shipping_amount`, NEW.`availability`, NEW.`observed_at`, NEW.`source_id`);
END;
--> statement-breakpoint
CREATE TRIGGER `offers_price_history_update` AFTER UPDATE ON `offers`
WHEN NEW.`price_amount` IS NOT OLD.`price_amount` OR NEW.`currency` IS NOT OLD.`currency`
  OR NEW.`shipping_amount` IS NOT OLD.`shipping_amount` OR NEW.`availability` IS NOT OLD.`availability`
BEGIN
  INSERT INTO `offer_price_history` (`gtin`, `merchant_id`, `price_amount`, `currency`, `shipping_amount`, `availability`, `observed_at`, `source_id`)
  VALUES (NEW.`gtin`, NEW.`merchant_id`, NEW.`price_amount`, NEW.`currency`, NEW.`shipping_amount`, NEW.`availability`, NEW.`observed_at`, NEW.`source_id`);
END;
--> statement-breakpoint
-- Offers stored before this migration start their history with what is known now.
INSERT INTO `offer_price_history` (`gtin`, `merchant_id`, `price_amount`, `currency`, `shipping_amount`, `availability`, `observed_at`, `source_id`)
SELECT `gtin`, `merchant_id`, `price_amount`, `currency`, `shipping_amount`, `availability`, `observed_at`, `source_id` FROM `offers`;
