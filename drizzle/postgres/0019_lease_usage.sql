CREATE TABLE "lease_usage" (
	"organization_id" text NOT NULL,
	"lease_id" text NOT NULL,
	"id" text NOT NULL,
	"amount" bigint NOT NULL,
	"allocations" jsonb NOT NULL,
	"key_id" text,
	"request_id" text NOT NULL,
	"gtin" text,
	"description" text NOT NULL,
	"items" integer NOT NULL,
	"created_at" bigint NOT NULL,
	CONSTRAINT "lease_usage_organization_id_lease_id_id_pk" PRIMARY KEY("organization_id","lease_id","id")
);
