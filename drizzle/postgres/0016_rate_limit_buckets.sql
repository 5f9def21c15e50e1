CREATE TABLE "rate_limit_buckets" (
	"bucket" text PRIMARY KEY NOT NULL,
	"tokens" double precision NOT NULL,
	"capacity" double precision NOT NULL,
	"refill_per_ms" double precision NOT NULL,
	"updated_at" bigint NOT NULL
);
--> statement-breakpoint
-- Leases tokens of several buckets at once (a request's key and organization): each bucket is
-- refilled up to `at` (the instance's clock, as in-memory buckets are; counted at most 5 s ahead of
-- the database's, and a bucket's time never goes back, so a skewed clock can delay refills but
-- never add any), then, when every bucket holds what it needs (at most its capacity: a take larger
-- than the bucket is admitted when it is full and leaves it in debt), each grants between its need
-- and its ask; otherwise none grants anything. The caller sorts the buckets, so concurrent leases
-- lock them in one order.
CREATE FUNCTION lease_rate_tokens(at bigint, buckets text[], capacities double precision[], refills double precision[], needs double precision[], asks double precision[])
RETURNS TABLE (leased_bucket text, granted double precision, tokens_left double precision)
LANGUAGE plpgsql AS $$
DECLARE
  now_ms bigint := least(at, floor(extract(epoch FROM clock_timestamp()) * 1000) + 5000);
  available double precision[] := '{}';
  bucket_times bigint[] := '{}';
  admitted boolean := true;
  held double precision;
  held_at bigint;
BEGIN
  FOR i IN 1 .. cardinality(buckets) LOOP
    INSERT INTO rate_limit_buckets AS b (bucket, tokens, capacity, refill_per_ms, updated_at)
    VALUES (buckets[i], capacities[i], capacities[i], refills[i], now_ms)
    ON CONFLICT (bucket) DO NOTHING;
    SELECT b.tokens, b.updated_at INTO held, held_at FROM rate_limit_buckets b WHERE b.bucket = buckets[i] FOR UPDATE;
    available[i] := least(capacities[i], held + greatest(0, now_ms - held_at) * refills[i]);
    bucket_times[i] := greatest(now_ms, held_at);
    IF available[i] < least(needs[i], capacities[i]) THEN admitted := false; END IF;
  END LOOP;
  FOR i IN 1 .. cardinality(buckets) LOOP
    leased_bucket := buckets[i];
    granted := CASE WHEN admitted THEN greatest(needs[i], least(asks[i], available[i])) ELSE 0 END;
    tokens_left := available[i] - granted;
    UPDATE rate_limit_buckets b
    SET tokens = tokens_left, capacity = capacities[i], refill_per_ms = refills[i], updated_at = bucket_times[i]
    WHERE b.bucket = buckets[i];
    RETURN NEXT;
  END LOOP;
END $$;
--> statement-breakpoint
-- Gives back tokens an instance leased and did not use, up to each bucket's capacity, in the
-- caller's (sorted) order of buckets, as leases lock them.
CREATE FUNCTION return_rate_tokens(buckets text[], amounts double precision[])
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  FOR i IN 1 .. cardinality(buckets) LOOP
    UPDATE rate_limit_buckets b SET tokens = least(b.capacity, b.tokens + amounts[i]) WHERE b.bucket = buckets[i];
  END LOOP;
END $$;
