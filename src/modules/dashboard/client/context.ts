import type { SessionUser } from "./api";

export type SignInMode = "oidc" | "development" | "off";

/** What a page gets from the shell: who is signed in, and how to move on, announce or report. */
export interface PageContext {
  user: SessionUser | null;
  signInMode: SignInMode;
  /** Goes to another dashboard page without reloading. */
  navigate(path: string, options?: { replace?: boolean }): void;
  /** A polite status message (screen readers read it when idle). */
  announce(message: string): void;
  /** An error message (read at once); a 401 sends the user to the sign-in page instead. */
  fail(error: unknown): void;
  /** Sets the page's title (tab and heading). Returns the heading, already in place. */
  heading(text: string): HTMLHeadingElement;
}
