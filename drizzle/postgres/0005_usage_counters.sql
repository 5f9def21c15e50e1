CREATE TABLE "usage_counters" (
	"organization_id" text NOT NULL,
	"period_ms" integer NOT NULL,
	"period_start" bigint NOT NULL,
	"key_id" text NOT NULL,
	"reason" text NOT NULL,
	"requests" bigint DEFAULT 0 NOT NULL,
	"credits" bigint DEFAULT 0 NOT NULL,
	CONSTRAINT "usage_counters_organization_id_period_ms_period_start_key_id_reason_pk" PRIMARY KEY("organization_id","period_ms","period_start","key_id","reason")
);
