ALTER TABLE `feed_sources` ADD `merchants` text DEFAULT '[]' NOT NULL;--> statement-breakpoint
ALTER TABLE `feed_sources` ADD `authoritative` integer DEFAULT false NOT NULL;--> statement-breakpoint
ALTER TABLE `products` ADD `described_by` text;--> statement-breakpoint
-- A source declared before merchant bindings existed is bound to the merchants whose offers it wrote last.
UPDATE `feed_sources` SET `merchants` = (
  SELECT json_group_array(`merchant_id`) FROM (SELECT DISTINCT `merchant_id` FROM `offers` WHERE `source_id` = `feed_sources`.`id` ORDER BY `merchant_id`)
);
--> statement-breakpoint
-- A product whose offers all come from one source is described by it; any other is the operator's.
UPDATE `products` SET `described_by` = (
  SELECT min(`source_id`) FROM `offers` WHERE `offers`.`gtin` = `products`.`gtin`
  HAVING count(DISTINCT `source_id`) = 1 AND count(`source_id`) = count(*)
);
