-- Keys rotated before this have no line: none of them can spend any more, so each live key starts its own.
ALTER TABLE "api_keys" ADD COLUMN "line_id" text;--> statement-breakpoint
CREATE INDEX "api_keys_line_idx" ON "api_keys" USING btree ("line_id");