DROP INDEX "credit_buckets_org_spendable_idx";--> statement-breakpoint
CREATE INDEX "credit_buckets_org_expiry_idx" ON "credit_buckets" USING btree ("organization_id","expires_at");