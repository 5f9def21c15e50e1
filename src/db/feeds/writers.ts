import type { FeedSource } from "./records";

/**
 * Who writes a batch of feed records. The operator (the CLI's `import`, demo data) is trusted with
 * every merchant and every product. A feed source writes offers, and merchant names, only for the
 * merchants it is bound to, and a product's title, brand and image under the precedence below.
 */
export type FeedWriter =
  | { kind: "operator" }
  | { kind: "source"; sourceId: string; sourceName: string; merchants: ReadonlySet<string>; authoritative: boolean };

export const OPERATOR: FeedWriter = { kind: "operator" };

export function sourceWriter(source: Pick<FeedSource, "id" | "name" | "merchants" | "authoritative">): FeedWriter {
  return { kind: "source", sourceId: source.id, sourceName: source.name, merchants: new Set(source.merchants), authoritative: source.authoritative };
}

/** The source id stamped on what the writer writes; null for the operator. */
export function writerSourceId(writer: FeedWriter): string | null {
  return writer.kind === "source" ? writer.sourceId : null;
}

/** Merchants named in a refusal at most: a rejected line's reason stays one short line. */
const NAMED_MERCHANTS = 3;

/** Why the writer may not write an offer of `merchantId` (the run report's reason), or null when it may. */
export function merchantRefusal(writer: FeedWriter, merchantId: string): string | null {
  if (writer.kind === "operator" || writer.merchants.has(merchantId)) return null;
  const named = [...writer.merchants].slice(0, NAMED_MERCHANTS).join(", ");
  const more = writer.merchants.size > NAMED_MERCHANTS ? ` and ${writer.merchants.size - NAMED_MERCHANTS} more` : "";
  return `merchantId: ${JSON.stringify(merchantId)} is not a merchant of source ${writer.sourceName} (it may write ${named === "" ? "none" : named + more})`;
}

/**
 * Whose descriptions (title, brand, image) a writer's records replace. "any": the operator and the
 * sources it marks authoritative replace them whoever gave them. "own": any other source replaces
 * only those of products it described first (a product it creates is its own); the first writer
 * keeps them.
 */
export function descriptionPrecedence(writer: FeedWriter): "any" | "own" {
  return writer.kind === "operator" || writer.authoritative ? "any" : "own";
}

/**
 * The SET expressions of the product upsert (PostgreSQL and SQLite alike) under a precedence: a
 * field the record gives replaces the stored one when the writer may describe the product, and the
 * writer then becomes its describer (`described_by`, null for the operator). Absent fields keep
 * the stored value.
 */
export function productDescriptionUpdates(precedence: "any" | "own"): Record<"title" | "brand" | "image_url" | "described_by", string> {
  const may = precedence === "any" ? "true" : "products.described_by = excluded.described_by";
  const gives = "(excluded.title <> '' OR excluded.brand IS NOT NULL OR excluded.image_url IS NOT NULL)";
  return {
    title: `CASE WHEN ${may} THEN coalesce(nullif(excluded.title, ''), products.title) ELSE products.title END`,
    brand: `CASE WHEN ${may} THEN coalesce(excluded.brand, products.brand) ELSE products.brand END`,
    image_url: `CASE WHEN ${may} THEN coalesce(excluded.image_url, products.image_url) ELSE products.image_url END`,
    described_by: `CASE WHEN ${may} AND ${gives} THEN excluded.described_by ELSE products.described_by END`,
  };
}
