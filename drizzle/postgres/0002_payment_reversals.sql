CREATE TABLE "payment_reversals" (
	"ref" text PRIMARY KEY NOT NULL,
	"refunded_amount" integer DEFAULT 0 NOT NULL,
	"dispute_id" text,
	"dispute_amount" integer DEFAULT 0 NOT NULL,
	"dispute_status" text,
	"updated_at" bigint NOT NULL
);
