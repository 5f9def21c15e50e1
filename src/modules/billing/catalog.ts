import { readFileSync } from "node:fs";
import { Type, type Static } from "@sinclair/typebox";
import { Value } from "@sinclair/typebox/value";
import { ConfigError } from "../../config";
import type { Language } from "../../http/i18n";

const ItemId = Type.String({ pattern: "^[a-z0-9][a-z0-9_-]{0,63}$" });
/** Names of an item in other languages than English (`name`); a language without one shows `name`. */
const LocalizedNames = Type.Optional(Type.Object({ fr: Type.Optional(Type.String({ minLength: 1, maxLength: 100 })) }, { additionalProperties: false }));
const Price = Type.Object(
  { amount: Type.Integer({ minimum: 0, maximum: 100_000_000 }), currency: Type.String({ pattern: "^[A-Z]{3}$" }) },
  { additionalProperties: false },
);

/** The shape of CATALOG_FILE (docs/api.md, "Billing"); `validityDays` is an optional addition. */
export const CatalogFileSchema = Type.Object(
  {
    packs: Type.Array(
      Type.Object(
        {
          id: ItemId,
          name: Type.String({ minLength: 1, maxLength: 100 }),
          names: LocalizedNames,
          credits: Type.Integer({ minimum: 1, maximum: 1_000_000_000 }),
          price: Price,
          /** Days the pack's credits stay spendable; absent: they never expire. */
          validityDays: Type.Optional(Type.Integer({ minimum: 1, maximum: 36_500 })),
        },
        { additionalProperties: false },
      ),
    ),
    plans: Type.Array(
      Type.Object(
        {
          id: ItemId,
          name: Type.String({ minLength: 1, maxLength: 100 }),
          names: LocalizedNames,
          creditsPerPeriod: Type.Integer({ minimum: 1, maximum: 1_000_000_000 }),
          interval: Type.Union([Type.Literal("month"), Type.Literal("year")]),
          price: Price,
        },
        { additionalProperties: false },
      ),
    ),
  },
  { additionalProperties: false },
);

export type CatalogFile = Static<typeof CatalogFileSchema>;
export type Pack = CatalogFile["packs"][number];
export type Plan = CatalogFile["plans"][number];

export interface Catalog {
  packs: Pack[];
  plans: Plan[];
}

export const DEFAULT_CATALOG: Catalog = {
  packs: [
    { id: "pack-1k", name: "1,000 credits", names: { fr: "1\u202f000 crédits" }, credits: 1_000, price: { amount: 1_000, currency: "EUR" } },
    { id: "pack-10k", name: "10,000 credits", names: { fr: "10\u202f000 crédits" }, credits: 10_000, price: { amount: 8_000, currency: "EUR" } },
    { id: "pack-100k", name: "100,000 credits", names: { fr: "100\u202f000 crédits" }, credits: 100_000, price: { amount: 60_000, currency: "EUR" } },
  ],
  plans: [
    { id: "basic-monthly", name: "Basic", creditsPerPeriod: 5_000, interval: "month", price: { amount: 2_900, currency: "EUR" } },
    { id: "pro-monthly", name: "Pro", creditsPerPeriod: 50_000, interval: "month", price: { amount: 19_900, currency: "EUR" } },
    {
      id: "pro-yearly",
      name: "Pro, yearly",
      names: { fr: "Pro, annuel" },
      creditsPerPeriod: 600_000,
      interval: "year",
      price: { amount: 199_000, currency: "EUR" },
    },
  ],
};

/** The name of a pack or plan in `language`: its localized name, else the English one. */
export function itemName(item: Pick<Pack, "name" | "names">, language: Language): string {
  return (language === "en" ? undefined : item.names?.[language]) ?? item.name;
}

// Intl formats any three capital letters; its list of currencies is the one to check against.
const CURRENCIES = new Set(Intl.supportedValuesOf("currency"));

/** Checks a parsed catalog; throws ConfigError naming CATALOG_FILE and the first problem. */
export function validateCatalog(value: unknown, source: string): Catalog {
  const fail = (message: string): never => {
    throw new ConfigError("CATALOG_FILE", `${source}: ${message}`);
  };
  const error = Value.Errors(CatalogFileSchema, value).First();
  if (error !== undefined) fail(`${error.path || "/"} ${error.message}`);
  const catalog = value as CatalogFile;
  for (const [kind, items] of [
    ["packs", catalog.packs],
    ["plans", catalog.plans],
  ] as const) {
    const seen = new Set<string>();
    items.forEach((item, index) => {
      if (seen.has(item.id)) fail(`/${kind}/${index}/id "${item.id}" is listed twice`);
      seen.add(item.id);
      if (!CURRENCIES.has(item.price.currency)) fail(`/${kind}/${index}/price/currency "${item.price.currency}" is not an ISO 4217 currency`);
    });
  }
  return { packs: catalog.packs, plans: catalog.plans };
}

/** The catalog of CATALOG_FILE, or the built-in one. Read once at start-up; a bad file stops it. */
export function loadCatalog(catalogFile: string | null): Catalog {
  if (catalogFile === null) return DEFAULT_CATALOG;
  let text: string;
  try {
    text = readFileSync(catalogFile, "utf8");
  } catch (error) {
    throw new ConfigError("CATALOG_FILE", `cannot read ${catalogFile}: ${(error as NodeJS.ErrnoException).code ?? String(error)}`);
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (error) {
    throw new ConfigError("CATALOG_FILE", `${catalogFile} is not valid JSON: ${(error as Error).message}`);
  }
  return validateCatalog(parsed, catalogFile);
}
