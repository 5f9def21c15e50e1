-- offers_source_idx keeps only offers written for a feed source, all the freshness metrics read:
-- the operator's import (no source) then writes one index fewer per offer.
DROP INDEX "offers_source_idx";--> statement-breakpoint
ALTER TABLE "offers" ADD COLUMN "state_since" bigint;--> statement-breakpoint
ALTER TABLE "offers" ADD COLUMN "state_source_id" text;--> statement-breakpoint
CREATE INDEX "offers_source_idx" ON "offers" USING btree ("source_id","observed_at") WHERE "offers"."source_id" IS NOT NULL;
--> statement-breakpoint
-- Price history no longer repeats each offer's current state (see the SQLite twin of this
-- migration): the offer holds it with `state_since`, offer_price_history the states it replaced.
UPDATE offers SET (state_since, state_source_id) = (
  SELECT h.observed_at, h.source_id FROM offer_price_history h
  WHERE h.gtin = offers.gtin AND h.merchant_id = offers.merchant_id ORDER BY h.id DESC LIMIT 1
);
--> statement-breakpoint
UPDATE offers SET state_since = observed_at, state_source_id = source_id WHERE state_since IS NULL;
--> statement-breakpoint
DELETE FROM offer_price_history WHERE id IN (SELECT max(id) FROM offer_price_history GROUP BY gtin, merchant_id)
  AND EXISTS (SELECT 1 FROM offers o WHERE o.gtin = offer_price_history.gtin AND o.merchant_id = offer_price_history.merchant_id);
--> statement-breakpoint
CREATE OR REPLACE FUNCTION offers_record_price_history() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO offer_price_history (gtin, merchant_id, price_amount, currency, shipping_amount, availability, observed_at, source_id)
  VALUES (OLD.gtin, OLD.merchant_id, OLD.price_amount, OLD.currency, OLD.shipping_amount, OLD.availability, OLD.state_since, OLD.state_source_id);
  RETURN NULL;
END;
$$;
--> statement-breakpoint
-- Same name as before (the copy from SQLite disables it by name), now on updates that change the state only.
DROP TRIGGER offers_price_history ON offers;
--> statement-breakpoint
CREATE TRIGGER offers_price_history AFTER UPDATE ON offers FOR EACH ROW
WHEN (NEW.price_amount IS DISTINCT FROM OLD.price_amount OR NEW.currency IS DISTINCT FROM OLD.currency
  OR NEW.shipping_amount IS DISTINCT FROM OLD.shipping_amount OR NEW.availability IS DISTINCT FROM OLD.availability)
EXECUTE FUNCTION offers_record_price_history();
