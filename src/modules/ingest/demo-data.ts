import { SYSTEM_USER_ID, type Availability, type Condition, type FeedRecord, type Store } from "../../db/store";
import { createApiKey } from "../keys/service";

const MERCHANTS = [
  ["m-alpha", "Alpha Electronics"],
  ["m-boulanger", "Boutique Boulanger"],
  ["m-citymarket", "City Market"],
  ["m-digitec", "Digital Corner"],
  ["m-euro", "EuroShop"],
  ["m-fnac", "Librairie Fnac-like"],
] as const;
const ITEMS = [
  "Wireless Mouse",
  "USB-C Cable",
  "Espresso Beans 1kg",
  "Fountain Pen",
  "LED Desk Lamp",
  "Notebook A5",
  "Headphones",
  "Water Bottle",
  "Phone Case",
  "Board Game",
];
const BRANDS = ["Acme", "Stabilo", "Logi", "Moleskine", null];
const AVAILABILITY: Availability[] = ["in_stock", "in_stock", "in_stock", "out_of_stock", "preorder", "unknown"];
const CONDITIONS: Condition[] = ["new", "new", "new", "used", "refurbished"];

/** The GTIN-13 with the given 12-digit body and its GS1 check digit. */
export function gtin13(body: string): string {
  let sum = 0;
  for (let index = 0; index < 12; index++) sum += Number(body[index]) * (index % 2 === 0 ? 1 : 3);
  return body + String((10 - (sum % 10)) % 10);
}

/** The GTIN the API reference uses in its examples (a real Faber-Castell pencil). */
export const DOCS_EXAMPLE_GTIN = "04006381333931";

/**
 * Deterministic demo GTINs: a 400 prefix, then a 9-digit counter. The first demo product (fresh
 * offers) is the API reference's example, so "Test Request" with the demo key is a billed answer.
 */
export function demoGTIN(index: number): string {
  if (index === 1) return DOCS_EXAMPLE_GTIN;
  return gtin13(`400${String(index).padStart(9, "0")}`).padStart(14, "0");
}

/** What demo product `index` holds: every 10th no offers, every 7th only stale offers, the rest fresh ones. */
export function demoKind(index: number): "fresh" | "stale" | "no-data" {
  return index % 10 === 0 ? "no-data" : index % 7 === 0 ? "stale" : "fresh";
}

/** The GTINs of the first `productCount` demo products that are of `kind`. */
export function demoGTINsOf(kind: ReturnType<typeof demoKind>, productCount: number): string[] {
  const gtins: string[] = [];
  for (let index = 1; index <= productCount; index++) if (demoKind(index) === kind) gtins.push(demoGTIN(index));
  return gtins;
}

/**
 * Demo catalogue: every 10th product has no offers, every 7th only stale offers, the rest fresh
 * offers from 1 to 4 merchants. Deterministic so tests and benchmarks can name GTINs.
 */
export function demoFeed(productCount: number, now: number, freshnessWindowMs: number): FeedRecord[] {
  const records: FeedRecord[] = [];
  for (let index = 1; index <= productCount; index++) {
    const gtin = demoGTIN(index);
    const brand = BRANDS[index % BRANDS.length] ?? undefined;
    const product = { gtin, title: `${ITEMS[index % ITEMS.length]} #${index}`, ...(brand ? { brand } : {}) };
    const kind = demoKind(index);
    if (kind === "no-data") {
      records.push({ product });
      continue;
    }
    const stale = kind === "stale";
    const offerCount = 1 + (index % 4);
    for (let m = 0; m < offerCount; m++) {
      const [merchantId, merchantName] = MERCHANTS[(index + m) % MERCHANTS.length]!;
      const age = stale ? freshnessWindowMs + 3_600_000 * (1 + m) : 60_000 * (5 + ((index * 7 + m * 13) % 600));
      records.push({
        product,
        offer: {
          merchantId,
          merchantName,
          priceAmount: 499 + ((index * 37 + m * 211) % 20_000),
          currency: "EUR",
          shippingAmount: m % 2 === 0 ? null : 490,
          availability: AVAILABILITY[(index + m) % AVAILABILITY.length]!,
          condition: CONDITIONS[(index + m) % CONDITIONS.length]!,
          url: `https://shop.example/${merchantId}/${gtin}`,
          observedAt: now - age,
        },
      });
    }
  }
  return records;
}

export interface DemoSeed {
  organizationId: string;
  keyId: string;
  clearKey: string;
  freshGTIN: string;
  products: number;
}

/** Loads the demo catalogue and a demo organization with credits and a ready key. */
export async function seedDemo(
  store: Store,
  options: { products: number; credits: number; keyPrefix: string; now: number; freshnessWindowMs: number },
): Promise<DemoSeed> {
  const feed = demoFeed(options.products, options.now, options.freshnessWindowMs);
  for (let start = 0; start < feed.length; start += 2000) await store.applyFeedRecords(feed.slice(start, start + 2000), options.now);
  await store.refreshCatalogStatistics();
  const organization = await store.createOrganization({ name: "Demo Organization", now: options.now });
  await store.grantCredits({
    organizationId: organization.id,
    source: "grant",
    type: "grant",
    amount: options.credits,
    expiresAt: null,
    description: "Demo credits",
    now: options.now,
  });
  await store.ensureSystemUser(options.now);
  const created = await createApiKey(store, {
    organizationId: organization.id,
    name: "Demo key",
    createdBy: SYSTEM_USER_ID,
    keyPrefix: options.keyPrefix,
    now: options.now,
  });
  return { organizationId: organization.id, keyId: created.key.id, clearKey: created.clearKey, freshGTIN: demoGTIN(1).slice(1), products: options.products };
}
