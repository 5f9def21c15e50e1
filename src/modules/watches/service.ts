import type { Store } from "../../db/store";
import type { PriceWatch, WatchTrigger } from "../../db/watches/records";
import { toISO } from "../../lib/clock";
import { newId } from "../../lib/ids";
import { Problem } from "../../http/problem";
import { normalizeGTIN } from "../products/gtin";

const WATCH_NOT_FOUND = {
  en: "No price watch of your organization has this id.",
  fr: "Aucune surveillance de prix de votre organisation n'a cet identifiant.",
};

export function watchJSON(watch: PriceWatch) {
  return {
    id: watch.id,
    gtin: watch.gtin,
    merchant: watch.merchantId,
    trigger: watch.trigger,
    below: watch.below,
    status: watch.status,
    pausedReason: watch.pausedReason,
    createdAt: toISO(watch.createdAt),
    lastTriggeredAt: toISO(watch.lastTriggeredAt),
  };
}

export interface CreateWatchInput {
  organizationId: string;
  gtin: string;
  merchant?: string;
  trigger: WatchTrigger;
  below?: { amount: number; currency: string };
  now: number;
}

/** Creates a watch: 400 for a GTIN that is not one, 422 when `below` and the trigger disagree, 409 past the organization's limit. */
export async function createWatch(store: Store, input: CreateWatchInput, rules: { limit: number; freshnessWindowMs: number }): Promise<PriceWatch> {
  const gtin = normalizeGTIN(input.gtin.trim());
  if (gtin === null) throw new Problem("invalid-gtin");
  if ((input.trigger === "below") !== (input.below !== undefined)) {
    throw new Problem("unprocessable-body", {
      detail: {
        en: 'below is required with the trigger "below", and only with it.',
        fr: "below est requis avec le déclencheur « below », et seulement avec lui.",
      },
    });
  }
  // Merchant ids are stored as feeds give them, trimmed (src/modules/ingest/feed-record.ts).
  const merchantId = input.merchant?.trim() || null;
  const created = await store.createWatch(
    { id: newId("wch", input.now), organizationId: input.organizationId, gtin, merchantId, trigger: input.trigger, below: input.below ?? null, now: input.now },
    rules,
  );
  if (!created.ok) {
    throw new Problem("conflict", {
      detail: {
        en: `Your organization has reached its limit of ${created.limit} price watches; delete one first.`,
        fr: `Votre organisation a atteint sa limite de ${created.limit} surveillances de prix ; supprimez-en une d'abord.`,
      },
      extensions: { limit: created.limit },
    });
  }
  return created.watch;
}

export async function watchOfOrganization(store: Store, organizationId: string, id: string): Promise<PriceWatch> {
  const watch = await store.getWatch(organizationId, id);
  if (watch === null) throw new Problem("not-found", { detail: WATCH_NOT_FOUND });
  return watch;
}

export async function deleteWatch(store: Store, organizationId: string, id: string): Promise<void> {
  if (!(await store.deleteWatch(organizationId, id))) throw new Problem("not-found", { detail: WATCH_NOT_FOUND });
}
