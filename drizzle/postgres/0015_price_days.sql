CREATE TABLE "offer_price_days" (
	"gtin" text NOT NULL,
	"merchant_id" text NOT NULL,
	"day" bigint NOT NULL,
	"currency" text NOT NULL,
	"lowest_amount" integer NOT NULL,
	"highest_amount" integer NOT NULL,
	"last_amount" integer NOT NULL,
	"availability" text NOT NULL,
	CONSTRAINT "offer_price_days_gtin_merchant_id_day_pk" PRIMARY KEY("gtin","merchant_id","day")
);
--> statement-breakpoint
ALTER TABLE "offer_price_history" ADD COLUMN "valid_to" bigint;--> statement-breakpoint
CREATE INDEX "offer_price_days_day_idx" ON "offer_price_days" USING btree ("gtin","day","merchant_id");--> statement-breakpoint
CREATE INDEX "offer_price_history_range_idx" ON "offer_price_history" USING btree ("gtin","observed_at","merchant_id","id");--> statement-breakpoint
-- Each history row keeps when its state ended (see the SQLite twin of this migration).
UPDATE offer_price_history SET valid_to = next.valid_to FROM (
  SELECT id, lead(valid_from) OVER (PARTITION BY gtin, merchant_id ORDER BY valid_from, position) AS valid_to
  FROM (
    SELECT id, gtin, merchant_id, observed_at AS valid_from, id AS position FROM offer_price_history
    UNION ALL
    SELECT NULL, gtin, merchant_id, state_since, 9007199254740991 FROM offers
  ) states
) AS next WHERE next.id = offer_price_history.id;
--> statement-breakpoint
-- The days of the history kept so far, as the trigger function below writes them.
WITH states AS (
  SELECT gtin, merchant_id, price_amount, currency, availability, observed_at AS t, id AS position FROM offer_price_history
  UNION ALL
  SELECT gtin, merchant_id, price_amount, currency, availability, state_since, 9007199254740991 FROM offers o
  WHERE EXISTS (SELECT 1 FROM offer_price_history h WHERE h.gtin = o.gtin AND h.merchant_id = o.merchant_id)
),
successors AS (
  SELECT *, lead(t) OVER (PARTITION BY gtin, merchant_id ORDER BY t, position) AS next_t FROM states
),
members AS (
  SELECT gtin, merchant_id, t - t % 86400000 AS day, price_amount, currency, availability, t, position FROM successors
  UNION ALL
  SELECT gtin, merchant_id, next_t - next_t % 86400000, price_amount, currency, availability, t, position FROM successors
  WHERE next_t IS NOT NULL AND next_t - next_t % 86400000 > t - t % 86400000 AND next_t % 86400000 <> 0
),
marked AS (
  SELECT *, first_value(price_amount) OVER w AS last_amount, first_value(currency) OVER w AS last_currency, first_value(availability) OVER w AS last_availability
  FROM members WINDOW w AS (PARTITION BY gtin, merchant_id, day ORDER BY t DESC, position DESC)
)
INSERT INTO offer_price_days (gtin, merchant_id, day, currency, lowest_amount, highest_amount, last_amount, availability)
SELECT gtin, merchant_id, day, last_currency, min(price_amount) FILTER (WHERE currency = last_currency), max(price_amount) FILTER (WHERE currency = last_currency), last_amount, last_availability
FROM marked GROUP BY gtin, merchant_id, day, last_currency, last_amount, last_availability;
--> statement-breakpoint
-- The trigger (same name, which the copy from SQLite disables) now also folds the states into their days.
CREATE OR REPLACE FUNCTION offers_record_price_history() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  starts_at_midnight boolean := NEW.state_since % 86400000 = 0;
BEGIN
  INSERT INTO offer_price_history (gtin, merchant_id, price_amount, currency, shipping_amount, availability, observed_at, source_id, valid_to)
  VALUES (OLD.gtin, OLD.merchant_id, OLD.price_amount, OLD.currency, OLD.shipping_amount, OLD.availability, OLD.state_since, OLD.state_source_id, NEW.state_since);
  INSERT INTO offer_price_days AS d (gtin, merchant_id, day, currency, lowest_amount, highest_amount, last_amount, availability)
  VALUES (OLD.gtin, OLD.merchant_id, OLD.state_since - OLD.state_since % 86400000, OLD.currency, OLD.price_amount, OLD.price_amount, OLD.price_amount, OLD.availability)
  ON CONFLICT (gtin, merchant_id, day) DO UPDATE SET
    lowest_amount = CASE WHEN d.currency = excluded.currency THEN least(d.lowest_amount, excluded.lowest_amount) ELSE excluded.lowest_amount END,
    highest_amount = CASE WHEN d.currency = excluded.currency THEN greatest(d.highest_amount, excluded.highest_amount) ELSE excluded.highest_amount END,
    currency = excluded.currency, last_amount = excluded.last_amount, availability = excluded.availability;
  INSERT INTO offer_price_days AS d (gtin, merchant_id, day, currency, lowest_amount, highest_amount, last_amount, availability)
  VALUES (NEW.gtin, NEW.merchant_id, NEW.state_since - NEW.state_since % 86400000, NEW.currency,
    CASE WHEN OLD.currency = NEW.currency AND NOT starts_at_midnight THEN least(OLD.price_amount, NEW.price_amount) ELSE NEW.price_amount END,
    CASE WHEN OLD.currency = NEW.currency AND NOT starts_at_midnight THEN greatest(OLD.price_amount, NEW.price_amount) ELSE NEW.price_amount END,
    NEW.price_amount, NEW.availability)
  ON CONFLICT (gtin, merchant_id, day) DO UPDATE SET
    lowest_amount = CASE WHEN d.currency = excluded.currency THEN least(d.lowest_amount, excluded.lowest_amount) ELSE excluded.lowest_amount END,
    highest_amount = CASE WHEN d.currency = excluded.currency THEN greatest(d.highest_amount, excluded.highest_amount) ELSE excluded.highest_amount END,
    currency = excluded.currency, last_amount = excluded.last_amount, availability = excluded.availability;
  RETURN NULL;
END;
$$;
