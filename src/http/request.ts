import { isLanguage, type Language, languageFromHeader } from "./i18n";

/** Response language: a valid `language` query parameter wins, then Accept-Language, then `en`. */
export function requestLanguage(request: Request): Language {
  const url = request.url;
  const queryStart = url.indexOf("?");
  if (queryStart !== -1) {
    const language = new URLSearchParams(url.slice(queryStart + 1)).get("language");
    if (isLanguage(language)) return language;
  }
  return languageFromHeader(request.headers.get("accept-language"));
}

/** The first query parameter given more than once (`?type=usage&type=grant`), or null. */
export function repeatedQueryParameter(url: string): string | null {
  const queryStart = url.indexOf("?");
  if (queryStart === -1) return null;
  const seen = new Set<string>();
  for (const name of new URLSearchParams(url.slice(queryStart + 1)).keys()) {
    if (seen.has(name)) return name;
    seen.add(name);
  }
  return null;
}
