CREATE TABLE "api_key_monthly_usage" (
	"key_id" text NOT NULL,
	"month" text NOT NULL,
	"spent" bigint DEFAULT 0 NOT NULL,
	CONSTRAINT "api_key_monthly_usage_key_id_month_pk" PRIMARY KEY("key_id","month")
);
--> statement-breakpoint
ALTER TABLE "api_keys" ADD COLUMN "expires_at" bigint;--> statement-breakpoint
ALTER TABLE "api_keys" ADD COLUMN "monthly_credit_limit" bigint;--> statement-breakpoint
ALTER TABLE "api_keys" ADD COLUMN "rate_limit" integer;--> statement-breakpoint
ALTER TABLE "api_key_monthly_usage" ADD CONSTRAINT "api_key_monthly_usage_key_id_api_keys_id_fk" FOREIGN KEY ("key_id") REFERENCES "public"."api_keys"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "reservations_key_idx" ON "reservations" USING btree ("key_id");