import type { Language } from "../../http/i18n";
import { type Catalog, itemName } from "./catalog";

type French = (groups: string[], name: (english: string) => string) => string;

/**
 * The ledger and the invoices store each description once, in English, as written when the credits
 * moved; these are the French forms of every text the service writes, applied when one is shown. A
 * text without a form (written by an older version, or an operator's) is shown as stored.
 */
const FRENCH: Array<[RegExp, French]> = [
  [/^Price look-up (\d+)$/, ([gtin]) => `Consultation de prix ${gtin}`],
  [/^Price look-ups of (\d+) GTINs$/, ([count]) => `Consultations de prix de ${count} GTIN`],
  [/^Price watch event (\d+)$/, ([gtin]) => `Événement de surveillance de prix ${gtin}`],
  [/^Demo credits$/, () => "Crédits de démonstration"],
  [/^Trial credits$/, () => "Crédits d'essai"],
  [/^Granted by an operator$/, () => "Accordés par un opérateur"],
  [/^Expired credits written off$/, () => "Crédits expirés retirés"],
  [/^Refund: credits a request in flight gave back$/, () => "Remboursement : crédits rendus par une requête en cours"],
  [/^Payment refunded: unspent credits withdrawn$/, () => "Paiement remboursé : crédits non utilisés retirés"],
  [/^Pack "(.+)": ([\d,]+) credits$/, ([pack, credits], name) => `Pack « ${name(pack!)} » : ${frenchNumber(credits!)} crédits`],
  [
    /^Subscription "(.+)": ([\d,]+) credits until (\d{4}-\d{2}-\d{2})$/,
    ([plan, credits, day], name) => `Abonnement « ${name(plan!)} » : ${frenchNumber(credits!)} crédits jusqu'au ${day}`,
  ],
  // Invoice lines (grants.ts orderInvoice).
  [/^(.+) \(([\d,]+) credits\)$/, ([pack, credits], name) => `${name(pack!)} (${frenchNumber(credits!)} crédits)`],
  [
    /^(.+) \(([\d,]+) credits per (month|year)\)$/,
    ([plan, credits, interval], name) => `${name(plan!)} (${frenchNumber(credits!)} crédits par ${interval === "month" ? "mois" : "an"})`,
  ],
];

/** A stored ledger or invoice description in `language`; pack and plan names as the catalog names them there. */
export function ledgerText(description: string, language: Language, catalog: Catalog): string {
  if (language === "en") return description;
  for (const [pattern, french] of FRENCH) {
    const match = pattern.exec(description);
    if (match !== null) return french(match.slice(1), (english) => catalogName(catalog, english, language));
  }
  return description;
}

/** A pack's or plan's name in `language`, found by the English name stored with an order; as stored when the catalog has no such item any more. */
export function catalogName(catalog: Catalog, english: string, language: Language): string {
  const item = catalog.packs.find((pack) => pack.name === english) ?? catalog.plans.find((plan) => plan.name === english);
  return item === undefined ? english : itemName(item, language);
}

/** "1,000" → "1 000" (narrow no-break space, as Intl writes French numbers); anything else as is. */
function frenchNumber(text: string): string {
  return /^\d{1,3}(,\d{3})+$/.test(text) ? text.replaceAll(",", "\u202f") : text;
}
