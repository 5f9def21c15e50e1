import type { ValidationError } from "elysia";
import { Problem } from "./problem";

export type Texts = { en: string; fr: string };

/** What a schema accepts, in plain words; null when nothing simpler than the validator's message fits. */
function expectation(schema: Record<string, any> | undefined): Texts | null {
  if (schema === undefined) return null;
  const values =
    Array.isArray(schema.anyOf) && schema.anyOf.every((member: any) => "const" in member) ? schema.anyOf.map((member: any) => member.const) : schema.enum;
  if (Array.isArray(values)) return { en: `one of: ${values.join(", ")}`, fr: `l'une des valeurs : ${values.join(", ")}` };
  const integer = schema.type === "integer" ? schema : Array.isArray(schema.anyOf) ? schema.anyOf.find((member: any) => member.type === "integer") : undefined;
  if (integer !== undefined) return wholeNumber(integer.minimum, integer.maximum);
  if (schema.type !== "string") return null;
  if (schema.format === "date-time") return { en: "a date and time such as 2026-11-22T10:00:00Z", fr: "une date et une heure comme 2026-11-22T10:00:00Z" };
  if (schema.format === "uri") return { en: "an absolute URL", fr: "une URL absolue" };
  if (schema.format === "email") return { en: "an email address", fr: "une adresse e-mail" };
  if (schema.pattern !== undefined) {
    return schema.maxLength === undefined
      ? { en: "in the documented form", fr: "au format documenté" }
      : {
          en: `${schema.minLength ?? 0} to ${schema.maxLength} characters in the documented form`,
          fr: `de ${schema.minLength ?? 0} à ${schema.maxLength} caractères au format documenté`,
        };
  }
  const { minLength: min, maxLength: max } = schema;
  if (min !== undefined && max !== undefined) return { en: `text of ${min} to ${max} characters`, fr: `un texte de ${min} à ${max} caractères` };
  if (max !== undefined) return { en: `text of at most ${max} characters`, fr: `un texte d'au plus ${max} caractères` };
  if (min !== undefined) return { en: `text of at least ${min} characters`, fr: `un texte d'au moins ${min} caractères` };
  return { en: "text", fr: "un texte" };
}

export function wholeNumber(minimum?: number, maximum?: number): Texts {
  if (minimum !== undefined && maximum !== undefined)
    return { en: `a whole number from ${minimum} to ${maximum}`, fr: `un nombre entier de ${minimum} à ${maximum}` };
  if (minimum !== undefined) return { en: `a whole number of at least ${minimum}`, fr: `un nombre entier d'au moins ${minimum}` };
  return { en: "a whole number", fr: "un nombre entier" };
}

/**
 * A validation failure in words a client developer reads once: "limit must be a whole number from
 * 1 to 100", "name is required", rather than the validator's own message.
 */
export function fromValidation(error: ValidationError): Problem {
  const first = error.valueError;
  const where = first?.path ? first.path.replace(/^\//, "").replaceAll("/", ".") : error.type;
  const expected = expectation(first?.schema as Record<string, any> | undefined);
  const missing = first?.value === undefined;
  const detail: Texts = missing
    ? { en: `${where} is required.`, fr: `${where} est obligatoire.` }
    : expected !== null
      ? { en: `${where} must be ${expected.en}.`, fr: `${where} doit être ${expected.fr}.` }
      : { en: `${where} is invalid: ${first?.message ?? "invalid value"}.`, fr: `${where} est invalide : ${first?.message ?? "valeur invalide"}.` };
  if (error.type === "body") return new Problem("unprocessable-body", { detail });
  return new Problem("invalid-parameter", { detail });
}

/** No parameter of this API takes several values: a repeated one is refused rather than one of its values silently kept. */
export function repeatedParameter(name: string): Texts {
  return { en: `${name} must be given once.`, fr: `${name} ne doit figurer qu'une fois.` };
}
