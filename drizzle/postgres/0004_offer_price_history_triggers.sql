-- Price history is written by the database itself (see the SQLite twin of this migration): an
-- offer's first observation, then each change of its price, currency, shipping or availability.
CREATE FUNCTION offers_record_price_history() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'UPDATE' AND NEW.price_amount IS NOT DISTINCT FROM OLD.price_amount AND NEW.currency IS NOT DISTINCT FROM OLD.currency
     AND NEW.shipping_amount IS NOT DISTINCT FROM OLD.shipping_amount AND NEW.availability IS NOT DISTINCT FROM OLD.availability THEN
    RETURN NULL;
  END IF;
  INSERT INTO offer_price_history (gtin, merchant_id, price_amount, currency, shipping_amount, availability, observed_at, source_id)
  VALUES (NEW.gtin, NEW.merchant_id, NEW.price_amount, NEW.currency, NEW.shipping_amount, NEW.availability, NEW.observed_at, NEW.source_id);
  RETURN NULL;
END;
$$;
--> statement-breakpoint
CREATE TRIGGER offers_price_history AFTER INSERT OR UPDATE ON offers FOR EACH ROW EXECUTE FUNCTION offers_record_price_history();
--> statement-breakpoint
INSERT INTO offer_price_history (gtin, merchant_id, price_amount, currency, shipping_amount, availability, observed_at, source_id)
SELECT gtin, merchant_id, price_amount, currency, shipping_amount, availability, observed_at, source_id FROM offers;
