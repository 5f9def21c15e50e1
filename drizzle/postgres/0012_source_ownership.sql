ALTER TABLE "feed_sources" ADD COLUMN "merchants" jsonb DEFAULT '[]'::jsonb NOT NULL;--> statement-breakpoint
ALTER TABLE "feed_sources" ADD COLUMN "authoritative" boolean DEFAULT false NOT NULL;--> statement-breakpoint
ALTER TABLE "products" ADD COLUMN "described_by" text;--> statement-breakpoint
-- A source declared before merchant bindings existed is bound to the merchants whose offers it wrote last.
UPDATE "feed_sources" SET "merchants" = coalesce(
  (SELECT jsonb_agg(DISTINCT "merchant_id" ORDER BY "merchant_id") FROM "offers" WHERE "offers"."source_id" = "feed_sources"."id"),
  '[]'::jsonb
);
--> statement-breakpoint
-- A product whose offers all come from one source is described by it; any other is the operator's.
UPDATE "products" SET "described_by" = (
  SELECT min("source_id") FROM "offers" WHERE "offers"."gtin" = "products"."gtin"
  HAVING count(DISTINCT "source_id") = 1 AND count("source_id") = count(*)
);
