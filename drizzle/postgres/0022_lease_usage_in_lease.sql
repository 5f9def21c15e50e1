-- Rows written before were debited by moving their lease's row: they hold their own credits.
ALTER TABLE "lease_usage" ADD COLUMN "in_lease" boolean DEFAULT false NOT NULL;--> statement-breakpoint
ALTER TABLE "lease_usage" ALTER COLUMN "in_lease" SET DEFAULT true;
