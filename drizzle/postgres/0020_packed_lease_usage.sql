ALTER TABLE "lease_usage" ADD COLUMN "look_ups" json;--> statement-breakpoint
-- Rows written before are packed one look-up each.
UPDATE "lease_usage" SET "look_ups" = json_build_array(json_build_object('id', "id", 'amount', "amount", 'allocations', "allocations", 'keyId', "key_id", 'requestId', "request_id", 'gtin', "gtin", 'description', "description", 'items', "items", 'createdAt', "created_at"));--> statement-breakpoint
ALTER TABLE "lease_usage" ALTER COLUMN "look_ups" SET NOT NULL;--> statement-breakpoint
ALTER TABLE "lease_usage" DROP COLUMN "allocations";--> statement-breakpoint
ALTER TABLE "lease_usage" DROP COLUMN "key_id";--> statement-breakpoint
ALTER TABLE "lease_usage" DROP COLUMN "request_id";--> statement-breakpoint
ALTER TABLE "lease_usage" DROP COLUMN "gtin";--> statement-breakpoint
ALTER TABLE "lease_usage" DROP COLUMN "description";--> statement-breakpoint
ALTER TABLE "lease_usage" DROP COLUMN "items";--> statement-breakpoint
ALTER TABLE "lease_usage" DROP COLUMN "created_at";
