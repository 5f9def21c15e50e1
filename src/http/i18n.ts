export const LANGUAGES = ["en", "fr"] as const;
export type Language = (typeof LANGUAGES)[number];

export function isLanguage(value: unknown): value is Language {
  return value === "en" || value === "fr";
}

/** First supported language of an Accept-Language header, by quality; `en` when none. */
export function languageFromHeader(header: string | null | undefined): Language {
  if (!header) return "en";
  let best: Language = "en";
  let bestQuality = -1;
  for (const part of header.split(",")) {
    const [tag = "", ...params] = part.trim().split(";");
    const base = tag.trim().toLowerCase().split("-")[0];
    if (!isLanguage(base)) continue;
    const qParam = params.find((p) => p.trim().startsWith("q="));
    const quality = qParam ? Number(qParam.trim().slice(2)) : 1;
    if (Number.isFinite(quality) && quality > bestQuality) {
      best = base;
      bestQuality = quality;
    }
  }
  return best;
}

export const AVAILABILITY_LABELS: Record<Language, Record<string, string>> = {
  en: { in_stock: "In stock", out_of_stock: "Out of stock", preorder: "Pre-order", unknown: "Availability unknown" },
  fr: { in_stock: "En stock", out_of_stock: "Rupture de stock", preorder: "Précommande", unknown: "Disponibilité inconnue" },
};
