// The dashboard's texts in English and French. The language follows the browser until the user picks
// one with the switch; the choice is kept in localStorage.

const en = {
  skip: "Skip to content",
  navLabel: "Dashboard",
  navKeys: "API keys",
  navBilling: "Billing",
  navQuickstart: "Quickstart",
  language: "Language",
  signOut: "Sign out",
  signedInAs: "{name}, {organization}",
  loading: "Loading…",
  previous: "Previous page",
  next: "Next page",
  pageN: "Page {n}",
  cancel: "Cancel",
  copy: "Copy",
  copied: "Copied to the clipboard.",
  copyFailed: "Copying failed: select the text and copy it yourself.",
  never: "Never",
  requestId: "Request id: {id}",
  networkError: "The service cannot be reached. Check your connection and try again.",
  notFound: "Page not found",

  signInTitle: "Sign in",
  signInIntro: "Manage your API keys, credits and invoices.",
  signInOIDC: "Sign in with your identity provider",
  signInDevNote: "Development mode: no identity provider is configured, so anyone can sign in with just an email address. Never run this mode on a public network.",
  email: "Email address",
  signInButton: "Sign in",
  signInOff: "Sign-in is not configured on this service: the operator must set OIDC_ISSUER and OIDC_CLIENT_ID.",
  signedOut: "You are signed out.",
  "signInError.expired": "The sign-in expired or was started in another window. Please try again.",
  "signInError.denied": "The sign-in was canceled at the identity provider.",
  "signInError.provider": "The identity provider reported an error. Please try again.",
  "signInError.unauthorized": "The identity provider's answer could not be verified. Please try again.",
  "signInError.forbidden": "Your identity provider did not share a verified email address, which this service needs.",
  "signInError.conflict": "This email address is already linked to another sign-in identity.",
  "signInError.unavailable": "The identity provider cannot be reached right now. Please try again shortly.",

  keysTitle: "API keys",
  keysIntro: "Data requests carry a key in the Authorization header. Use one key per environment, rotate production keys at least every 90 days, and revoke a key at once if it may have leaked.",
  createTitle: "Create a key",
  keyName: "Key name",
  keyNameHint: "For example production or staging (1 to 100 characters).",
  createButton: "Create key",
  secretTitle: "Secret of the key “{name}”",
  secretWarning: "Copy this secret now and store it safely. It is shown only this once and cannot be retrieved later; if you lose it, rotate the key.",
  secretLabel: "Secret key",
  secretDone: "I have stored it",
  keysCaption: "Keys of {organization}",
  colName: "Name",
  colStatus: "Status",
  colPrefix: "Prefix",
  colCreatedBy: "Created by",
  colCreated: "Created",
  colLastUsed: "Last used",
  colActions: "Actions",
  "status.ACTIVE": "Active",
  "status.ROTATED": "Rotated",
  "status.REVOKED": "Revoked",
  rotate: "Rotate",
  revoke: "Revoke",
  rotateTitle: "Rotate the key “{name}”?",
  rotateText: "A new secret replaces {prefix}…, which stops working immediately. Update every system that uses it.",
  revokeTitle: "Revoke the key “{name}”?",
  revokeText: "{prefix}… stops working immediately and for good. This cannot be undone.",
  revoked: "Key “{name}” revoked.",
  noKeys: "No key yet: create one above.",
  colControls: "Limits",
  spentOfLimit: "{spent} of {limit} credits this month",
  spentNoLimit: "{spent} credits this month, no monthly limit",
  expiresOn: "Expires {date}",
  expiredOn: "Expired {date}",
  perSecond: "{n} requests/s",
  editControls: "Edit limits",
  controlsTitle: "Limits of the key “{name}”",
  controlsHint: "Leave a field empty for no limit of its own. A monthly limit counts credits per calendar month (UTC) and applies at once, even below what the key already spent.",
  fieldExpiresAt: "Expires at (your local time)",
  fieldMonthlyLimit: "Monthly credit limit",
  fieldRateLimit: "Rate limit (requests per second)",
  createLimits: "Limits (optional)",
  save: "Save",
  controlsSaved: "Limits of “{name}” saved.",

  billingTitle: "Billing",
  balanceTitle: "Balance",
  creditsAvailable: "credits available",
  reserved: "{n} reserved by requests in progress",
  bucketsCaption: "Credit buckets, in the order they are spent",
  colSource: "Source",
  colRemaining: "Remaining",
  colGranted: "Granted",
  colExpires: "Expires",
  colAdded: "Added",
  "source.pack": "Pack",
  "source.subscription": "Subscription",
  "source.grant": "Grant",
  "source.trial": "Trial",
  noBuckets: "No credits yet: buy a pack or subscribe below.",
  usageTitle: "Usage over the last 30 days",
  usageSummary: "{total} credits used in 30 days; busiest day {day} with {peak}.",
  usageNone: "No credits used in the last 30 days.",
  usageAsTable: "Show as a table",
  usageCaption: "Requests and credits per day (UTC)",
  colDay: "Day",
  colCredits: "Credits",
  colRequests: "Requests",
  usageBar: "{day}: {n} credits",
  buyTitle: "Buy credits",
  packCredits: "{n} credits",
  validFor: "valid {n} days",
  neverExpire: "never expire",
  buy: "Buy",
  subscribeTitle: "Subscriptions",
  perMonth: "{n} credits every month",
  perYear: "{n} credits every year",
  subscribe: "Subscribe",
  portalText: "Cancel a subscription and find every invoice in the billing portal.",
  openPortal: "Open the billing portal",
  checkoutSuccess: "Payment received, thank you. The credits are in your balance (with some payment providers they take a few moments).",
  checkoutCanceled: "Checkout canceled: nothing was charged.",
  transactionsTitle: "Transactions",
  transactionsCaption: "Ledger transactions, newest first",
  colDate: "Date",
  colType: "Type",
  colAmount: "Credits",
  colBalanceAfter: "Balance after",
  colDescription: "Description",
  "type.purchase": "Purchase",
  "type.subscription": "Subscription",
  "type.grant": "Grant",
  "type.trial": "Trial",
  "type.usage": "Usage",
  "type.expiry": "Expiry",
  "type.refund": "Refund",
  "type.adjustment": "Adjustment",
  noTransactions: "No transaction yet.",
  invoicesTitle: "Invoices",
  invoicesCaption: "Invoices, newest first",
  colNumber: "Number",
  colTotal: "Total",
  colDocuments: "Documents",
  "invoice.draft": "Draft",
  "invoice.open": "Open",
  "invoice.paid": "Paid",
  "invoice.void": "Void",
  viewInvoice: "View invoice {number}",
  invoicePDF: "PDF of invoice {number}",
  noInvoices: "No invoice yet.",

  quickTitle: "Quickstart",
  quickIntro: "Call the price API with one of your keys. The dashboard never shows a secret twice, so keep yours in an environment variable.",
  quickKey: "Key",
  quickStep1: "Put the key in an environment variable: run this, then paste the full secret you copied when you created or rotated it.",
  quickStep2: "Look up the price offers of a product by its GTIN:",
  quickStep3: "Check your credit balance with the same key:",
  quickComment: "paste the full secret of “{name}” (it starts with {prefix}), then press Enter",
  quickNoKey: "You have no active key yet.",
  quickCreate: "Create a key",
  quickDocs: "Every endpoint, parameter and error is described in the",
  apiReference: "API reference",
};

export type MessageKey = keyof typeof en;

const fr: Record<MessageKey, string> = {
  skip: "Aller au contenu",
  navLabel: "Tableau de bord",
  navKeys: "Clés d'API",
  navBilling: "Facturation",
  navQuickstart: "Démarrage rapide",
  language: "Langue",
  signOut: "Se déconnecter",
  signedInAs: "{name}, {organization}",
  loading: "Chargement…",
  previous: "Page précédente",
  next: "Page suivante",
  pageN: "Page {n}",
  cancel: "Annuler",
  copy: "Copier",
  copied: "Copié dans le presse-papiers.",
  copyFailed: "La copie a échoué : sélectionnez le texte et copiez-le vous-même.",
  never: "Jamais",
  requestId: "Identifiant de requête : {id}",
  networkError: "Le service est injoignable. Vérifiez votre connexion et réessayez.",
  notFound: "Page introuvable",

  signInTitle: "Connexion",
  signInIntro: "Gérez vos clés d'API, vos crédits et vos factures.",
  signInOIDC: "Se connecter avec votre fournisseur d'identité",
  signInDevNote: "Mode développement : aucun fournisseur d'identité n'est configuré, n'importe qui peut donc se connecter avec une simple adresse e-mail. N'utilisez jamais ce mode sur un réseau public.",
  email: "Adresse e-mail",
  signInButton: "Se connecter",
  signInOff: "La connexion n'est pas configurée sur ce service : l'opérateur doit définir OIDC_ISSUER et OIDC_CLIENT_ID.",
  signedOut: "Vous êtes déconnecté.",
  "signInError.expired": "La connexion a expiré ou a été commencée dans une autre fenêtre. Veuillez réessayer.",
  "signInError.denied": "La connexion a été annulée chez le fournisseur d'identité.",
  "signInError.provider": "Le fournisseur d'identité a signalé une erreur. Veuillez réessayer.",
  "signInError.unauthorized": "La réponse du fournisseur d'identité n'a pas pu être vérifiée. Veuillez réessayer.",
  "signInError.forbidden": "Votre fournisseur d'identité n'a pas communiqué d'adresse e-mail vérifiée, indispensable à ce service.",
  "signInError.conflict": "Cette adresse e-mail est déjà liée à une autre identité de connexion.",
  "signInError.unavailable": "Le fournisseur d'identité est injoignable pour le moment. Réessayez dans un instant.",

  keysTitle: "Clés d'API",
  keysIntro: "Les requêtes de données portent une clé dans l'en-tête Authorization. Utilisez une clé par environnement, renouvelez les clés de production au moins tous les 90 jours et révoquez aussitôt une clé qui a pu fuiter.",
  createTitle: "Créer une clé",
  keyName: "Nom de la clé",
  keyNameHint: "Par exemple production ou recette (1 à 100 caractères).",
  createButton: "Créer la clé",
  secretTitle: "Secret de la clé « {name} »",
  secretWarning: "Copiez ce secret maintenant et conservez-le en lieu sûr. Il n'est affiché que cette fois et ne pourra plus être retrouvé ; si vous le perdez, renouvelez la clé.",
  secretLabel: "Clé secrète",
  secretDone: "Je l'ai conservée",
  keysCaption: "Clés de {organization}",
  colName: "Nom",
  colStatus: "État",
  colPrefix: "Préfixe",
  colCreatedBy: "Créée par",
  colCreated: "Créée le",
  colLastUsed: "Dernière utilisation",
  colActions: "Actions",
  "status.ACTIVE": "Active",
  "status.ROTATED": "Renouvelée",
  "status.REVOKED": "Révoquée",
  rotate: "Renouveler",
  revoke: "Révoquer",
  rotateTitle: "Renouveler la clé « {name} » ?",
  rotateText: "Un nouveau secret remplace {prefix}…, qui cesse de fonctionner immédiatement. Mettez à jour tous les systèmes qui l'utilisent.",
  revokeTitle: "Révoquer la clé « {name} » ?",
  revokeText: "{prefix}… cesse de fonctionner immédiatement et définitivement. Cette action est irréversible.",
  revoked: "Clé « {name} » révoquée.",
  noKeys: "Aucune clé pour l'instant : créez-en une ci-dessus.",
  colControls: "Limites",
  spentOfLimit: "{spent} crédits sur {limit} ce mois-ci",
  spentNoLimit: "{spent} crédits ce mois-ci, sans limite mensuelle",
  expiresOn: "Expire le {date}",
  expiredOn: "Expirée le {date}",
  perSecond: "{n} requêtes/s",
  editControls: "Modifier les limites",
  controlsTitle: "Limites de la clé « {name} »",
  controlsHint: "Laissez un champ vide pour ne pas fixer de limite propre. La limite mensuelle compte les crédits par mois civil (UTC) et s'applique aussitôt, même en dessous de ce que la clé a déjà dépensé.",
  fieldExpiresAt: "Expire le (heure locale)",
  fieldMonthlyLimit: "Limite mensuelle de crédits",
  fieldRateLimit: "Limite de débit (requêtes par seconde)",
  createLimits: "Limites (facultatives)",
  save: "Enregistrer",
  controlsSaved: "Limites de « {name} » enregistrées.",

  billingTitle: "Facturation",
  balanceTitle: "Solde",
  creditsAvailable: "crédits disponibles",
  reserved: "{n} réservés par des requêtes en cours",
  bucketsCaption: "Lots de crédits, dans l'ordre où ils sont consommés",
  colSource: "Origine",
  colRemaining: "Restants",
  colGranted: "Accordés",
  colExpires: "Expiration",
  colAdded: "Ajoutés le",
  "source.pack": "Pack",
  "source.subscription": "Abonnement",
  "source.grant": "Attribution",
  "source.trial": "Essai",
  noBuckets: "Aucun crédit pour l'instant : achetez un pack ou abonnez-vous ci-dessous.",
  usageTitle: "Consommation des 30 derniers jours",
  usageSummary: "{total} crédits consommés en 30 jours ; jour le plus chargé : {day} avec {peak}.",
  usageNone: "Aucun crédit consommé ces 30 derniers jours.",
  usageAsTable: "Afficher sous forme de tableau",
  usageCaption: "Requêtes et crédits par jour (UTC)",
  colDay: "Jour",
  colCredits: "Crédits",
  colRequests: "Requêtes",
  usageBar: "{day} : {n} crédits",
  buyTitle: "Acheter des crédits",
  packCredits: "{n} crédits",
  validFor: "valables {n} jours",
  neverExpire: "sans expiration",
  buy: "Acheter",
  subscribeTitle: "Abonnements",
  perMonth: "{n} crédits chaque mois",
  perYear: "{n} crédits chaque année",
  subscribe: "S'abonner",
  portalText: "Résiliez un abonnement et retrouvez toutes vos factures dans le portail de facturation.",
  openPortal: "Ouvrir le portail de facturation",
  checkoutSuccess: "Paiement reçu, merci. Les crédits sont sur votre solde (avec certains prestataires de paiement, ils arrivent après quelques instants).",
  checkoutCanceled: "Paiement annulé : rien n'a été débité.",
  transactionsTitle: "Transactions",
  transactionsCaption: "Transactions du grand livre, les plus récentes d'abord",
  colDate: "Date",
  colType: "Type",
  colAmount: "Crédits",
  colBalanceAfter: "Solde après",
  colDescription: "Description",
  "type.purchase": "Achat",
  "type.subscription": "Abonnement",
  "type.grant": "Attribution",
  "type.trial": "Essai",
  "type.usage": "Consommation",
  "type.expiry": "Expiration",
  "type.refund": "Remboursement",
  "type.adjustment": "Ajustement",
  noTransactions: "Aucune transaction pour l'instant.",
  invoicesTitle: "Factures",
  invoicesCaption: "Factures, les plus récentes d'abord",
  colNumber: "Numéro",
  colTotal: "Total",
  colDocuments: "Documents",
  "invoice.draft": "Brouillon",
  "invoice.open": "À payer",
  "invoice.paid": "Payée",
  "invoice.void": "Annulée",
  viewInvoice: "Voir la facture {number}",
  invoicePDF: "PDF de la facture {number}",
  noInvoices: "Aucune facture pour l'instant.",

  quickTitle: "Démarrage rapide",
  quickIntro: "Appelez l'API de prix avec l'une de vos clés. Le tableau de bord n'affiche jamais un secret deux fois : gardez le vôtre dans une variable d'environnement.",
  quickKey: "Clé",
  quickStep1: "Placez la clé dans une variable d'environnement : lancez ceci, puis collez le secret complet copié lors de sa création ou de son renouvellement.",
  quickStep2: "Consultez les offres de prix d'un produit par son GTIN :",
  quickStep3: "Consultez votre solde de crédits avec la même clé :",
  quickComment: "collez le secret complet de « {name} » (il commence par {prefix}), puis appuyez sur Entrée",
  quickNoKey: "Vous n'avez encore aucune clé active.",
  quickCreate: "Créer une clé",
  quickDocs: "Chaque point d'accès, paramètre et erreur est décrit dans la",
  apiReference: "référence de l'API",
};

export type Language = "en" | "fr";
export const LANGUAGE_NAMES: Record<Language, string> = { en: "English", fr: "Français" };
const STORAGE_KEY = "price-service.language";
const MESSAGES: Record<Language, Record<MessageKey, string>> = { en, fr };

function storedLanguage(): Language | null {
  try {
    const value = localStorage.getItem(STORAGE_KEY);
    return value === "en" || value === "fr" ? value : null;
  } catch {
    return null; // storage disabled: follow the browser
  }
}

/** The chosen language, else the first of the browser's languages we speak, else English. */
export function initialLanguage(): Language {
  const stored = storedLanguage();
  if (stored !== null) return stored;
  for (const tag of navigator.languages ?? [navigator.language]) {
    const base = tag.toLowerCase().split("-")[0];
    if (base === "en" || base === "fr") return base;
  }
  return "en";
}

let current: Language = "en";

export function language(): Language {
  return current;
}

/** Switches the texts, the document language and, with `remember`, the stored choice. */
export function setLanguage(next: Language, options: { remember: boolean }): void {
  current = next;
  document.documentElement.lang = next;
  if (options.remember) {
    try {
      localStorage.setItem(STORAGE_KEY, next);
    } catch {
      // storage disabled: the choice lasts until the page is reloaded
    }
  }
}

/** A message in the current language, with `{name}` placeholders filled in. */
export function t(key: MessageKey, values: Record<string, string | number> = {}): string {
  return MESSAGES[current][key].replace(/\{(\w+)\}/g, (_, name: string) => String(values[name] ?? `{${name}}`));
}

export function formatNumber(value: number): string {
  return new Intl.NumberFormat(current).format(value);
}

export function formatDate(value: string | Date): string {
  return new Intl.DateTimeFormat(current, { dateStyle: "medium" }).format(new Date(value));
}

export function formatDateTime(value: string | Date): string {
  return new Intl.DateTimeFormat(current, { dateStyle: "medium", timeStyle: "short" }).format(new Date(value));
}
