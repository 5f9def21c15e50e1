ALTER TABLE "reservations" ADD COLUMN "instance_id" text;--> statement-breakpoint
ALTER TABLE "reservations" ADD COLUMN "expires_at" bigint;