import type { Language } from "./i18n";

/** The closed list of error slugs (docs/api.md, "Problems"), with status and texts in one place. */
export const PROBLEMS = {
  unauthorized: {
    status: 401,
    title: "Unauthorized",
    en: "The API key or session is missing, revoked or invalid.",
    fr: "La clé d'API ou la session est absente, révoquée ou invalide.",
  },
  forbidden: { status: 403, title: "Forbidden", en: "This request is not allowed.", fr: "Cette requête n'est pas autorisée." },
  "not-found": { status: 404, title: "Not Found", en: "The requested resource does not exist.", fr: "La ressource demandée n'existe pas." },
  "product-not-found": { status: 404, title: "Product Not Found", en: "No product matches this GTIN.", fr: "Aucun produit ne correspond à ce GTIN." },
  "invalid-gtin": {
    status: 400,
    title: "Invalid GTIN",
    en: "The GTIN must be 8, 12, 13 or 14 digits with a valid check digit.",
    fr: "Le GTIN doit comporter 8, 12, 13 ou 14 chiffres avec une clé de contrôle valide.",
  },
  "invalid-parameter": {
    status: 400,
    title: "Invalid Parameter",
    en: "A query or path parameter is invalid.",
    fr: "Un paramètre de requête ou de chemin est invalide.",
  },
  "invalid-body": { status: 400, title: "Invalid Body", en: "The request body is invalid.", fr: "Le corps de la requête est invalide." },
  "unprocessable-body": {
    status: 422,
    title: "Unprocessable Body",
    en: "The request body is well-formed but a field is missing, invalid or not acceptable.",
    fr: "Le corps de la requête est bien formé mais un champ est absent, invalide ou inacceptable.",
  },
  "insufficient-credits": {
    status: 402,
    title: "Insufficient Credits",
    en: "Not enough credits to perform this request.",
    fr: "Crédits insuffisants pour effectuer cette requête.",
  },
  "invalid-key-state": {
    status: 409,
    title: "Invalid Key State",
    en: "Only an ACTIVE key can be rotated or revoked.",
    fr: "Seule une clé ACTIVE peut être renouvelée ou révoquée.",
  },
  conflict: { status: 409, title: "Conflict", en: "The request conflicts with the current state.", fr: "La requête est en conflit avec l'état actuel." },
  "method-not-allowed": {
    status: 405,
    title: "Method Not Allowed",
    en: "This method is not allowed on this resource; see the Allow header.",
    fr: "Cette méthode n'est pas autorisée sur cette ressource ; voir l'en-tête Allow.",
  },
  "payload-too-large": { status: 413, title: "Payload Too Large", en: "The request body is too large.", fr: "Le corps de la requête est trop volumineux." },
  "unsupported-media-type": {
    status: 415,
    title: "Unsupported Media Type",
    en: "The request body must be JSON.",
    fr: "Le corps de la requête doit être du JSON.",
  },
  "rate-limited": { status: 429, title: "Too Many Requests", en: "Rate limit exceeded; retry later.", fr: "Limite de débit dépassée ; réessayez plus tard." },
  internal: { status: 500, title: "Internal Server Error", en: "An unexpected error occurred.", fr: "Une erreur inattendue s'est produite." },
  unavailable: { status: 503, title: "Service Unavailable", en: "The service is temporarily unavailable.", fr: "Le service est temporairement indisponible." },
} as const satisfies Record<string, { status: number; title: string; en: string; fr: string }>;

export type ProblemSlug = keyof typeof PROBLEMS;

export interface ProblemBody {
  type: string;
  title: string;
  status: number;
  detail: string;
  instance?: string;
  requestId?: string;
  [extension: string]: unknown;
}

/** What a problem says beyond its slug; every member is optional. */
export interface ProblemOptions {
  /** Overrides the table's localized text when the situation needs a precise message. */
  detail?: Record<Language, string>;
  /** Extra members of the problem body. */
  extensions?: Record<string, unknown>;
  /** Response headers sent with the problem. */
  headers?: Record<string, string>;
}

/** The one error type services throw; its status is its slug's, from the table. */
export class Problem extends Error {
  readonly detail: Record<Language, string> | undefined;
  readonly extensions: Record<string, unknown>;
  readonly headers: Record<string, string>;

  constructor(
    readonly slug: ProblemSlug,
    options: ProblemOptions = {},
  ) {
    super(slug);
    this.detail = options.detail;
    this.extensions = options.extensions ?? {};
    this.headers = options.headers ?? {};
  }

  get status(): number {
    return PROBLEMS[this.slug].status;
  }

  /** The same problem with more: extensions and headers are merged, a new detail replaces the old. */
  with(options: ProblemOptions): Problem {
    return new Problem(this.slug, {
      detail: options.detail ?? this.detail,
      extensions: { ...this.extensions, ...options.extensions },
      headers: { ...this.headers, ...options.headers },
    });
  }
}

export function problemBody(problem: Problem, options: { typeBase: string; language: Language; requestId: string }): ProblemBody {
  const entry = PROBLEMS[problem.slug];
  return {
    type: `${options.typeBase}/${problem.slug}`,
    title: entry.title,
    status: problem.status,
    detail: problem.detail?.[options.language] ?? entry[options.language],
    requestId: options.requestId,
    ...problem.extensions,
  };
}

/** The problem of a body that does not parse as JSON. */
export function notJSON(): Problem {
  return new Problem("invalid-body", { detail: { en: "The request body is not valid JSON.", fr: "Le corps de la requête n'est pas un JSON valide." } });
}
