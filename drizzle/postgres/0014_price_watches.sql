CREATE TABLE "price_watches" (
	"id" text PRIMARY KEY NOT NULL,
	"organization_id" text NOT NULL,
	"gtin" text NOT NULL,
	"merchant_id" text,
	"trigger" text NOT NULL,
	"below_amount" bigint,
	"below_currency" text,
	"status" text NOT NULL,
	"paused_reason" text,
	"armed" boolean NOT NULL,
	"last_merchant_id" text,
	"last_price" bigint,
	"last_currency" text,
	"last_availability" text,
	"last_observed_at" bigint,
	"created_at" bigint NOT NULL,
	"last_triggered_at" bigint
);
--> statement-breakpoint
CREATE TABLE "watch_changes" (
	"id" bigint PRIMARY KEY GENERATED ALWAYS AS IDENTITY (sequence name "watch_changes_id_seq" INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1),
	"gtin" text NOT NULL
);
--> statement-breakpoint
ALTER TABLE "price_watches" ADD CONSTRAINT "price_watches_organization_id_organizations_id_fk" FOREIGN KEY ("organization_id") REFERENCES "public"."organizations"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "price_watches_organization_idx" ON "price_watches" USING btree ("organization_id","id");--> statement-breakpoint
CREATE INDEX "price_watches_gtin_idx" ON "price_watches" USING btree ("gtin");--> statement-breakpoint
CREATE INDEX "price_watches_paused_idx" ON "price_watches" USING btree ("organization_id") WHERE status = 'paused';--> statement-breakpoint
-- A watched product whose offers change is queued for the watch evaluator (see the SQLite twin of
-- this migration). Statement triggers over the transition tables: one query per import statement,
-- not one function call per offer.
CREATE FUNCTION offers_queue_inserted_watches() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO watch_changes (gtin) SELECT DISTINCT n.gtin FROM inserted n WHERE EXISTS (SELECT 1 FROM price_watches w WHERE w.gtin = n.gtin);
  RETURN NULL;
END;
$$;
--> statement-breakpoint
CREATE FUNCTION offers_queue_updated_watches() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO watch_changes (gtin)
  SELECT DISTINCT n.gtin FROM updated n JOIN replaced o ON o.gtin = n.gtin AND o.merchant_id = n.merchant_id
  WHERE (n.price_amount IS DISTINCT FROM o.price_amount OR n.currency IS DISTINCT FROM o.currency
      OR n.shipping_amount IS DISTINCT FROM o.shipping_amount OR n.availability IS DISTINCT FROM o.availability)
    AND EXISTS (SELECT 1 FROM price_watches w WHERE w.gtin = n.gtin);
  RETURN NULL;
END;
$$;
--> statement-breakpoint
CREATE TRIGGER offers_watch_insert AFTER INSERT ON offers REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION offers_queue_inserted_watches();
--> statement-breakpoint
CREATE TRIGGER offers_watch_update AFTER UPDATE ON offers REFERENCING OLD TABLE AS replaced NEW TABLE AS updated FOR EACH STATEMENT EXECUTE FUNCTION offers_queue_updated_watches();
