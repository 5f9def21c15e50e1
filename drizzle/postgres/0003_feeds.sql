CREATE TABLE "feed_runs" (
	"id" text PRIMARY KEY NOT NULL,
	"source_id" text NOT NULL,
	"trigger" text NOT NULL,
	"status" text NOT NULL,
	"started_at" bigint NOT NULL,
	"duration_ms" bigint NOT NULL,
	"file" text,
	"http_status" integer,
	"attempts" integer NOT NULL,
	"records_read" bigint NOT NULL,
	"products" bigint NOT NULL,
	"offers" bigint NOT NULL,
	"rejected_count" bigint NOT NULL,
	"rejected" jsonb NOT NULL,
	"error" text
);
--> statement-breakpoint
CREATE TABLE "feed_source_files" (
	"source_id" text NOT NULL,
	"name" text NOT NULL,
	"size" bigint NOT NULL,
	"modified_at" bigint NOT NULL,
	"run_id" text NOT NULL,
	CONSTRAINT "feed_source_files_source_id_name_size_modified_at_pk" PRIMARY KEY("source_id","name","size","modified_at")
);
--> statement-breakpoint
CREATE TABLE "feed_sources" (
	"id" text PRIMARY KEY NOT NULL,
	"name" text NOT NULL,
	"kind" text NOT NULL,
	"location" text,
	"format" text,
	"interval_ms" bigint,
	"timeout_ms" bigint NOT NULL,
	"retries" integer NOT NULL,
	"etag" text,
	"last_modified" text,
	"next_run_at" bigint,
	"lease_owner" text,
	"lease_until" bigint,
	"last_run_at" bigint,
	"last_success_at" bigint,
	"created_at" bigint NOT NULL,
	"removed_at" bigint
);
--> statement-breakpoint
CREATE TABLE "feed_tokens" (
	"id" text PRIMARY KEY NOT NULL,
	"source_id" text,
	"scope" text NOT NULL,
	"name" text NOT NULL,
	"secret_hash" text NOT NULL,
	"created_at" bigint NOT NULL,
	"revoked_at" bigint,
	"last_used_at" bigint
);
--> statement-breakpoint
CREATE TABLE "offer_price_history" (
	"id" bigint PRIMARY KEY GENERATED ALWAYS AS IDENTITY (sequence name "offer_price_history_id_seq" INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1),
	"gtin" text NOT NULL,
	"merchant_id" text NOT NULL,
	"price_amount" integer NOT NULL,
	"currency" text NOT NULL,
	"shipping_amount" integer,
	"availability" text NOT NULL,
	"observed_at" bigint NOT NULL,
	"source_id" text
);
--> statement-breakpoint
ALTER TABLE "offers" ADD COLUMN "source_id" text;--> statement-breakpoint
ALTER TABLE "feed_runs" ADD CONSTRAINT "feed_runs_source_id_feed_sources_id_fk" FOREIGN KEY ("source_id") REFERENCES "public"."feed_sources"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "feed_source_files" ADD CONSTRAINT "feed_source_files_source_id_feed_sources_id_fk" FOREIGN KEY ("source_id") REFERENCES "public"."feed_sources"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "feed_tokens" ADD CONSTRAINT "feed_tokens_source_id_feed_sources_id_fk" FOREIGN KEY ("source_id") REFERENCES "public"."feed_sources"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "feed_runs_source_idx" ON "feed_runs" USING btree ("source_id","id");--> statement-breakpoint
CREATE UNIQUE INDEX "feed_sources_name_unique" ON "feed_sources" USING btree ("name");--> statement-breakpoint
CREATE INDEX "feed_sources_due_idx" ON "feed_sources" USING btree ("next_run_at");--> statement-breakpoint
CREATE INDEX "feed_tokens_source_idx" ON "feed_tokens" USING btree ("source_id");--> statement-breakpoint
CREATE INDEX "offer_price_history_offer_idx" ON "offer_price_history" USING btree ("gtin","merchant_id","observed_at");--> statement-breakpoint
CREATE INDEX "offer_price_history_observed_idx" ON "offer_price_history" USING btree ("observed_at");--> statement-breakpoint
CREATE INDEX "offers_source_idx" ON "offers" USING btree ("source_id","observed_at");