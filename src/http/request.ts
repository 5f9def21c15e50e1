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
