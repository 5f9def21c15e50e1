ALTER TABLE "credit_transactions" ADD COLUMN "look_ups" json;--> statement-breakpoint
ALTER TABLE "credit_transactions" ADD COLUMN "first_created_at" bigint;--> statement-breakpoint
CREATE INDEX "credit_transactions_packed_idx" ON "credit_transactions" USING btree ("organization_id","created_at","id") WHERE look_ups IS NOT NULL;--> statement-breakpoint
-- Every ledger entry, one row each: a settled usage row's packed look-ups unpacked.
CREATE VIEW "ledger_entries" AS
  SELECT "id", "organization_id", "type", "amount", "balance_after", "bucket_id", "key_id", "request_id", "gtin", "description", "created_at"
  FROM "credit_transactions" WHERE "look_ups" IS NULL
  UNION ALL
  SELECT e."id", t."organization_id", t."type", e."amount", e."balanceAfter", e."bucketId", e."keyId", e."requestId", e."gtin", e."description", e."createdAt"
  FROM "credit_transactions" t
  CROSS JOIN LATERAL json_to_recordset(t."look_ups") AS e("id" text, "amount" bigint, "balanceAfter" bigint, "bucketId" text, "keyId" text,
    "requestId" text, "gtin" text, "description" text, "createdAt" bigint)
  WHERE t."look_ups" IS NOT NULL;
