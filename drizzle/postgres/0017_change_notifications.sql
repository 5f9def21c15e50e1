-- Instances keep API key credentials, the catalog version and balances in memory; these triggers
-- tell them when any changes, on the price_service_changes channel, as "<schema> key <key id>",
-- "<schema> catalog <version>", "<schema> credits <organization id>" and "<schema> reset" (the
-- schema: several deployments or tests may share one database). A key's last_used_at is not part of
-- its credential and notifies nothing; a debit's bucket updates notify nothing either (the debit sets
-- price_service.debit): a notifying transaction takes a database-wide lock at its commit.
CREATE FUNCTION price_service_key_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('price_service_changes', TG_TABLE_SCHEMA || ' key ' || OLD.id);
  RETURN NULL;
END $$;
--> statement-breakpoint
CREATE TRIGGER api_keys_credential_changed AFTER UPDATE ON api_keys FOR EACH ROW
WHEN ((OLD.id, OLD.key_hash, OLD.status, OLD.organization_id, OLD.line_id, OLD.expires_at, OLD.monthly_credit_limit, OLD.rate_limit, OLD.key_prefix)
  IS DISTINCT FROM (NEW.id, NEW.key_hash, NEW.status, NEW.organization_id, NEW.line_id, NEW.expires_at, NEW.monthly_credit_limit, NEW.rate_limit, NEW.key_prefix))
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
--> statement-breakpoint
-- Emptied tables (TRUNCATE fires no row trigger): everything remembered goes.
CREATE FUNCTION price_service_emptied() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('price_service_changes', TG_TABLE_SCHEMA || ' reset');
  RETURN NULL;
END $$;
--> statement-breakpoint
CREATE TRIGGER api_keys_emptied AFTER TRUNCATE ON api_keys FOR EACH STATEMENT EXECUTE FUNCTION price_service_emptied();
--> statement-breakpoint
CREATE TRIGGER credit_buckets_emptied AFTER TRUNCATE ON credit_buckets FOR EACH STATEMENT EXECUTE FUNCTION price_service_emptied();
--> statement-breakpoint
CREATE TRIGGER catalog_version_emptied AFTER TRUNCATE ON catalog_version FOR EACH STATEMENT EXECUTE FUNCTION price_service_emptied();
