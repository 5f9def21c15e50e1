import packageJSON from "../../../package.json";
import type { FeedSource, FeedSourceKind } from "../../db/feeds/records";
import { systemClock } from "../../lib/clock";
import { parseDuration } from "../../lib/duration";
import { newId } from "../../lib/ids";
import { createLogger } from "../../lib/logger";
import { createOutboundClient } from "../../lib/outbound";
import { operatorSourceJSON, runJSON, sourceStatuses } from "../../modules/feeds/freshness";
import { FeedScheduler, MAX_FEED_RETRIES } from "../../modules/feeds/scheduler";
import { createFeedToken, feedTokenJSON } from "../../modules/feeds/tokens";
import { MAX_MERCHANT_ID_CHARS } from "../../modules/ingest/feed-record";
import { outboundPolicyOf } from "../../services";
import { type Command, output, parseCommandArgs, programName, requireOption, UsageError, wholeNumber } from "../command";
import { importProgressLine } from "./import";

const NAME = /^[a-z0-9][a-z0-9._-]{0,62}$/;
const DEFAULT_INTERVAL = { url: "15m", directory: "1m" } as const;
const MIN_INTERVAL_MS = 1000;
const MAX_TIMEOUT_MS = 10 * 60_000;

const DETAILS = `Sources:
  url        pulled every --every (default ${DEFAULT_INTERVAL.url}) with If-None-Match / If-Modified-Since; gzip accepted;
             each attempt times out after --timeout (default 30s) and failures are retried --retries times (default 3)
             with exponential back-off from 1s; 304 is a successful run that writes nothing
  directory  scanned every --every (default ${DEFAULT_INTERVAL.directory}); each new file (name, size and modification time
             not seen before) is imported once, oldest first; names starting with "." or ending in .tmp/.part are
             skipped (write the file, then rename it); .csv and .csv.gz are CSV, other files NDJSON; .gz is gunzipped
  push       POST ${"/api/v1/feeds/push"} with Authorization: Bearer <push token>, Content-Type application/x-ndjson or text/csv
A source writes offers (and merchant names) only for the merchants of --merchants (ids, comma-separated); a
record for any other merchant is rejected and reported. A product's title, brand and image stay those of the
first writer that gave them, unless a source is --authoritative; the operator's import always replaces them.
Records follow the rules of import (see import --help). Every run keeps a report: feeds runs SOURCE.
A source is silent when it has had no successful run within FRESHNESS_WINDOW; serve logs a warning for it.
Tokens are shown once and stored only as a SHA-256 hash: a push token posts to one source, a read token reads
GET /api/v1/feeds/sources and /api/v1/feeds/sources/{id}/runs. Removing a source revokes its tokens.`;

export const feedsCommand: Command = {
  name: "feeds",
  summary: "Declare feed sources (URL, directory, push), see their freshness and runs, manage feed tokens",
  usage: [
    "feeds add NAME --url URL [--merchants ID,…] [--authoritative] [--every 15m] [--timeout 30s] [--retries 3] [--format ndjson|csv] [--json]",
    "feeds add NAME --directory DIR [--merchants ID,…] [--authoritative] [--every 1m] [--format ndjson|csv] [--json]",
    "feeds add NAME --push [--merchants ID,…] [--authoritative] [--json]",
    "feeds set SOURCE [--merchants ID,…] [--authoritative | --not-authoritative] [--json]",
    "feeds list [--json]   (each source's merchants, last run, last success and share of fresh offers)",
    "feeds runs SOURCE [--limit N] [--json]",
    "feeds run SOURCE [--json]   (pulls or scans a url or directory source now)",
    "feeds remove SOURCE [--json]",
    "feeds token create --source SOURCE [--name NAME] [--json]   (a push token for the source; shown once)",
    "feeds token create --read --name NAME [--json]   (a token for the read endpoints; shown once)",
    "feeds token list [--json]",
    "feeds token revoke TOKEN_ID [--json]",
  ].join("\n  "),
  details: DETAILS,
  async run(context) {
    const { values, positionals } = parseCommandArgs(context, "feeds", {
      url: { type: "string" },
      directory: { type: "string" },
      push: { type: "boolean", default: false },
      every: { type: "string" },
      timeout: { type: "string" },
      retries: { type: "string" },
      format: { type: "string" },
      limit: { type: "string" },
      source: { type: "string" },
      name: { type: "string" },
      read: { type: "boolean", default: false },
      merchants: { type: "string" },
      authoritative: { type: "boolean", default: false },
      "not-authoritative": { type: "boolean", default: false },
    });
    const json = values.json === true;
    const now = Date.now();
    const findSource = async (idOrName: string | undefined): Promise<FeedSource> => {
      if (idOrName === undefined) throw new UsageError(`a SOURCE (id or name) is needed; see ${programName()} feeds --help`);
      const source = await (await context.store()).getFeedSource(idOrName);
      if (source === null || source.removedAt !== null) throw new UsageError(`no feed source "${idOrName}"; feeds list shows them`);
      return source;
    };
    switch (positionals[0]) {
      case "add": {
        const name = positionals[1];
        if (name === undefined || !NAME.test(name)) throw new UsageError("feeds add needs a NAME: 1 to 63 lowercase letters, digits, '.', '_' or '-'");
        const kinds = (["url", "directory", "push"] as const).filter((kind) => (kind === "push" ? values.push === true : values[kind] !== undefined));
        if (kinds.length !== 1) throw new UsageError("feeds add needs exactly one of --url URL, --directory DIR or --push");
        const kind: FeedSourceKind = kinds[0]!;
        let location: string | null = null;
        if (kind === "url") {
          const url = URL.parse(values.url!);
          if (url === null || (url.protocol !== "http:" && url.protocol !== "https:"))
            throw new UsageError(`--url must be an http(s) URL, got "${values.url}"`);
          location = url.toString();
        } else if (kind === "directory") {
          const { resolve } = await import("node:path");
          const { statSync } = await import("node:fs");
          location = resolve(values.directory!);
          if (!statSync(location, { throwIfNoEntry: false })?.isDirectory()) throw new UsageError(`--directory ${location} is not a directory`);
        } else if (values.every !== undefined || values.timeout !== undefined || values.retries !== undefined) {
          throw new UsageError("--every, --timeout and --retries apply to --url and --directory sources");
        }
        if (values.format !== undefined && values.format !== "ndjson" && values.format !== "csv") throw new UsageError("--format must be ndjson or csv");
        const intervalMs = kind === "push" ? null : duration(values.every ?? DEFAULT_INTERVAL[kind], "every", MIN_INTERVAL_MS, 365 * 86_400_000);
        const timeoutMs = duration(values.timeout ?? "30s", "timeout", 100, MAX_TIMEOUT_MS);
        const retries = values.retries === undefined ? 3 : wholeNumber(values.retries, "retries", 0);
        if (retries > MAX_FEED_RETRIES) throw new UsageError(`--retries must be at most ${MAX_FEED_RETRIES}`);
        const store = await context.store();
        const merchants = merchantList(values.merchants ?? "");
        const source = await store.createFeedSource({
          id: newId("src", now),
          name,
          kind,
          location,
          format: (values.format as "ndjson" | "csv" | undefined) ?? null,
          intervalMs,
          timeoutMs,
          retries,
          createdAt: now,
          merchants,
          authoritative: values.authoritative === true,
        });
        if (source === null) throw new UsageError(`a feed source named "${name}" already exists; feeds list shows them`);
        const pushHint = kind === "push" ? `\npush to it with a token: ${programName()} feeds token create --source ${name}` : "";
        const unboundHint =
          merchants.length === 0 ? `\nit is bound to no merchant, so its offers are rejected: ${programName()} feeds set ${name} --merchants ID,…` : "";
        output(
          context,
          json,
          await statusJSON(context, source, now),
          `${source.id}\t${source.name}\t${kind}${location === null ? "" : `\t${location}`}\t${trustText(source)}${pushHint}${unboundHint}`,
        );
        return;
      }
      case "set": {
        const source = await findSource(positionals[1]);
        if (values.authoritative === true && values["not-authoritative"] === true)
          throw new UsageError("give --authoritative or --not-authoritative, not both");
        const authoritative = values.authoritative === true ? true : values["not-authoritative"] === true ? false : undefined;
        const merchants = values.merchants === undefined ? undefined : merchantList(values.merchants);
        if (merchants === undefined && authoritative === undefined)
          throw new UsageError("feeds set needs --merchants ID,…, --authoritative or --not-authoritative");
        const changed = await (await context.store()).setFeedSourceTrust(source.id, { merchants, authoritative });
        if (changed === null) throw new UsageError(`no feed source "${positionals[1]}"`);
        output(context, json, await statusJSON(context, changed, now), `${changed.id}\t${changed.name}\t${trustText(changed)}`);
        return;
      }
      case "list": {
        const statuses = await sourceStatuses(await context.store(), now, context.config.freshnessWindowMs);
        const rows = statuses.map((s) => {
          const last = s.source.lastSuccessAt === null ? "never" : new Date(s.source.lastSuccessAt).toISOString();
          const share = s.offers === 0 ? "no offers" : `${Math.round(s.freshRatio * 1000) / 10}% of ${s.offers} offers fresh`;
          return `${s.source.id}\t${s.source.name}\t${s.source.kind}${s.source.location === null ? "" : `\t${s.source.location}`}\t${trustText(s.source)}\tlast success ${last}\t${share}${s.silent ? "\tSILENT" : ""}`;
        });
        output(
          context,
          json,
          statuses.map(operatorSourceJSON),
          rows.length === 0 ? `no feed sources; add one with ${programName()} feeds add NAME --url URL` : rows.join("\n"),
        );
        return;
      }
      case "runs": {
        const source = await findSource(positionals[1]);
        const limit = values.limit === undefined ? 20 : wholeNumber(values.limit, "limit");
        const page = await (await context.store()).listFeedRuns(source.id, { limit: Math.min(limit, 1000) });
        const runs = page.items.map(runJSON);
        const human = runs.map((run) => {
          const lines = run.rejected.slice(0, 20).map((r) => `  line ${r.line}: ${r.error}`);
          return `${run.id}\t${run.startedAt}\t${run.status}\tread ${run.recordsRead}, products ${run.products}, offers ${run.offers}, rejected ${run.rejectedCount}, ${run.durationMs} ms${run.error ? `\t${run.error}` : ""}${lines.length ? `\n${lines.join("\n")}` : ""}`;
        });
        output(context, json, runs, human.length === 0 ? `no runs of ${source.name} yet` : human.join("\n"));
        return;
      }
      case "run": {
        const source = await findSource(positionals[1]);
        if (source.kind === "push") throw new UsageError(`${source.name} is a push source: it is written by POST /api/v1/feeds/push`);
        const logger = createLogger({ level: "silent" });
        let progress: { reading: string | null; line: ReturnType<typeof importProgressLine> } = { reading: null, line: importProgressLine(context, json) };
        const scheduler = new FeedScheduler({
          store: await context.store(),
          clock: systemClock,
          logger,
          freshnessWindowMs: context.config.freshnessWindowMs,
          outbound: createOutboundClient({ policy: outboundPolicyOf(context.config) }),
          sleep: (ms) => Bun.sleep(ms),
          retryBaseMs: 1000,
          bodyLimitBytes: context.config.feedBodyLimitBytes,
          userAgent: `price-service/${packageJSON.version}`,
          onProgress: (reading, report, bytesRead) => {
            // A directory source imports its new files one after the other: one line each.
            if (reading !== progress.reading) progress = { reading, line: importProgressLine(context, json, `${source.name} ${reading}`) };
            progress.line.update(report, bytesRead);
          },
        });
        const runs = await scheduler.runNow(source).finally(() => progress.line.done());
        if (runs === null) {
          console.error(`price-service: ${source.name} is being run already (by serve or another command); try again when it is done`);
          return 1;
        }
        const reports = runs.map(runJSON);
        output(
          context,
          json,
          reports,
          reports.length === 0
            ? `${source.name}: no new files`
            : reports
                .map(
                  (r) =>
                    `${r.id}\t${r.status}\tread ${r.recordsRead}, products ${r.products}, offers ${r.offers}, rejected ${r.rejectedCount}${r.error ? `\t${r.error}` : ""}`,
                )
                .join("\n"),
        );
        return reports.some((r) => r.status === "failed") ? 1 : 0;
      }
      case "remove": {
        const source = await findSource(positionals[1]);
        const removed = await (await context.store()).removeFeedSource(source.id, now);
        if (removed === null) throw new UsageError(`no feed source "${positionals[1]}"`);
        output(
          context,
          json,
          { id: removed.id, removedAt: new Date(now).toISOString() },
          `${removed.id}\tremoved (its tokens are revoked; its offers and runs stay)`,
        );
        return;
      }
      case "token":
        return tokenCommand(context, positionals.slice(1), values, json, findSource, now);
      default:
        throw new UsageError(`unknown subcommand "${positionals[0] ?? ""}"; use add, set, list, runs, run, remove or token`);
    }
  },
};

async function tokenCommand(
  context: Parameters<Command["run"]>[0],
  positionals: string[],
  values: { source?: string; name?: string; read?: boolean },
  json: boolean,
  findSource: (idOrName: string | undefined) => Promise<FeedSource>,
  now: number,
): Promise<number | void> {
  const store = await context.store();
  switch (positionals[0]) {
    case "create": {
      if ((values.read === true) === (values.source !== undefined))
        throw new UsageError("feeds token create needs exactly one of --source SOURCE (a push token) or --read (a read token)");
      const source = values.source === undefined ? null : await findSource(values.source);
      if (source !== null && source.kind !== "push")
        throw new UsageError(`${source.name} is a ${source.kind} source; push tokens are for sources added with --push`);
      const name = values.read === true ? requireOption(values, "name") : values.name?.trim() || source!.name;
      if (name.length > 100) throw new UsageError("--name must be at most 100 characters");
      const created = await createFeedToken(store, { scope: source === null ? "read" : "push", sourceId: source?.id ?? null, name, now });
      output(
        context,
        json,
        { token: feedTokenJSON(created.token), clearToken: created.clearToken },
        `${created.token.id}\t${created.clearToken}\n(the token is shown once)`,
      );
      return;
    }
    case "list": {
      const tokens = (await store.listFeedTokens()).map(feedTokenJSON);
      output(
        context,
        json,
        tokens,
        tokens.length === 0
          ? "no feed tokens"
          : tokens.map((t) => `${t.id}\t${t.scope}\t${t.sourceId ?? "-"}\t${t.name}${t.revokedAt ? "\tREVOKED" : ""}`).join("\n"),
      );
      return;
    }
    case "revoke": {
      const id = positionals[1];
      if (id === undefined) throw new UsageError("feeds token revoke needs a TOKEN_ID; feeds token list shows them");
      const revoked = await store.revokeFeedToken(id, now);
      if (revoked === null) throw new UsageError(`no active feed token ${id}; feeds token list shows them`);
      output(context, json, feedTokenJSON(revoked), `${revoked.id}\tREVOKED`);
      return;
    }
    default:
      throw new UsageError(`unknown subcommand "token ${positionals[0] ?? ""}"; use token create, token list or token revoke`);
  }
}

/** The merchant ids of --merchants: comma-separated, each as a feed's merchantId is written; "" is none. */
function merchantList(raw: string): string[] {
  const ids = raw
    .split(",")
    .map((id) => id.trim())
    .filter((id) => id !== "");
  const tooLong = ids.find((id) => id.length > MAX_MERCHANT_ID_CHARS);
  if (tooLong !== undefined) throw new UsageError(`--merchants: "${tooLong}" is longer than ${MAX_MERCHANT_ID_CHARS} characters`);
  return [...new Set(ids)];
}

/** A source's merchants and precedence, as feeds list prints them. */
function trustText(source: FeedSource): string {
  return `merchants ${source.merchants.length === 0 ? "none" : source.merchants.join(",")}${source.authoritative ? "\tauthoritative" : ""}`;
}

async function statusJSON(context: Parameters<Command["run"]>[0], source: FeedSource, now: number) {
  const statuses = await sourceStatuses(await context.store(), now, context.config.freshnessWindowMs);
  return operatorSourceJSON(statuses.find((s) => s.source.id === source.id)!);
}

function duration(raw: string, name: string, min: number, max: number): number {
  const ms = parseDuration(raw);
  if (ms === null || ms < min || ms > max)
    throw new UsageError(`--${name} must be a duration such as 30s, 15m or 1h, from ${min} ms to ${max / 1000} s, got "${raw}"`);
  return ms;
}
