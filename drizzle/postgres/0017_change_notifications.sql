-- Instances keep API key credentials and the catalog version in memory; these triggers tell them
-- when either changes, on the price_service_changes channel, as "<schema> key <key hash>" and
-- "<schema> catalog <version>" (the schema: tests run one database with a schema each). A key's
-- last_used_at is not part of its credential and notifies nothing.
CREATE FUNCTION price_service_key_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('price_service_changes', TG_TABLE_SCHEMA || ' key ' || OLD.key_hash);
  RETURN NULL;
END $$;
--> statement-breakpoint
CREATE TRIGGER api_keys_credential_changed AFTER UPDATE ON api_keys FOR EACH ROW
WHEN ((OLD.key_hash, OLD.status, OLD.organization_id, OLD.line_id, OLD.expires_at, OLD.monthly_credit_limit, OLD.rate_limit, OLD.key_prefix)
  IS DISTINCT FROM (NEW.key_hash, NEW.status, NEW.organization_id, NEW.line_id, NEW.expires_at, NEW.monthly_credit_limit, NEW.rate_limit, NEW.key_prefix))
EXECUTE FUNCTION price_service_key_changed();
--> statement-breakpoint
CREATE TRIGGER api_keys_deleted AFTER DELETE ON api_keys FOR EACH ROW EXECUTE FUNCTION price_service_key_changed();
--> statement-breakpoint
CREATE FUNCTION price_service_catalog_moved() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('price_service_changes', TG_TABLE_SCHEMA || ' catalog ' || NEW.version);
  RETURN NULL;
END $$;
--> statement-breakpoint
CREATE TRIGGER catalog_version_moved AFTER INSERT OR UPDATE ON catalog_version FOR EACH ROW EXECUTE FUNCTION price_service_catalog_moved();
--> statement-breakpoint
-- A change to an organization's buckets outside a debit (a grant, a refund, an expiry, a capped
-- key's reservation or its release) tells instances to read the balance again: "<schema> credits
-- <organization>". A debit sends what the buckets hold after it instead (price_service.debit set).
CREATE FUNCTION price_service_credits_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF current_setting('price_service.debit', true) IS DISTINCT FROM 'on' THEN
    IF TG_OP = 'DELETE' THEN
      PERFORM pg_notify('price_service_changes', TG_TABLE_SCHEMA || ' credits ' || OLD.organization_id);
    ELSE
      PERFORM pg_notify('price_service_changes', TG_TABLE_SCHEMA || ' credits ' || NEW.organization_id);
    END IF;
  END IF;
  RETURN NULL;
END $$;
--> statement-breakpoint
CREATE TRIGGER credit_buckets_changed AFTER INSERT OR UPDATE OR DELETE ON credit_buckets FOR EACH ROW EXECUTE FUNCTION price_service_credits_changed();
