// The simulation's model: what it creates (organizations, keys, products, instances on one
// database) and what it remembers of what it sent (requests and their answers, purchases and the
// provider events still to deliver), which the operations act on and the invariants check.
import { PostgresStore } from "../../src/db/postgres-store";
import { SQLiteStore } from "../../src/db/sqlite-store";
import type { Store } from "../../src/db/store";
import type { ServeLock } from "../../src/db/sqlite-serve-lock";
import type { createApp } from "../../src/app";
import type { createServices } from "../../src/services";
import type { FakeClock } from "../../src/lib/clock";
import { applyPostgresMigrations } from "../../src/db/migrate";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { TestDatabase } from "../support/context";
import { createTestSchema, dropTestSchema } from "../support/schemas";

export type StoreKind = "sqlite" | "postgres";

/** Fault classes, each switchable, keyed by what they attack. */
export interface Faults {
  /** An instance dies between two steps: its memory (SQLite holds, in-flight requests) is lost. */
  crash: boolean;
  /** A write inside the debit, refund or grant transaction fails (a trigger raises). */
  failedWrite: boolean;
  /** Another connection holds the SQLite write lock for a while. */
  lockHeld: boolean;
  /** A second instance whose clock runs 61 s ahead (PostgreSQL: instances share the database). */
  clockSkew: boolean;
  /** A look-up (keyed or not, single or batch) stalls inside its work until an `unstall` step, while the clock may move on past the stale-reservation and claim ages. */
  stall: boolean;
  /** An operator CLI process works on the same database (grants, balance reads, order completion). */
  cliProcess: boolean;
  /** Provider events arrive twice and out of order; refunds and disputes may precede their payment. */
  providerDisorder: boolean;
  /** PostgreSQL ends the connections of transactions in flight (a restart, a network cut) while look-ups run. */
  connectionLost: boolean;
  /** A second `serve` tries to start on the SQLite file an instance serves. */
  secondServe: boolean;
}

export const ALL_FAULTS: Faults = {
  crash: true,
  failedWrite: true,
  lockHeld: true,
  clockSkew: true,
  stall: true,
  cliProcess: true,
  providerDisorder: true,
  connectionLost: true,
  secondServe: true,
};

export interface SimulationReport {
  seed: number;
  store: StoreKind;
  operations: number;
  faultsInjected: number;
  /** Steps run, by operation (faults included). */
  operationCounts: Record<string, number>;
  /** Faults injected, by class. */
  faultCounts: Record<string, number>;
  /** What the instances' credit leases went through (PostgreSQL). */
  leaseCounts: Record<string, number>;
  violations: string[];
  trace: string[];
}

/** mulberry32: a tiny PRNG, enough to make reproducible choices from a seed. */
export function prng(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export const FRESH = "04006381333931";
export const FRESH_TOO = "05012345678900";
export const STALE = "00012345600012";
export const MISSING = "09780201379624";
/** A fresh product whose read stalls until an `unstall` step: a request held inside its work. */
export const STALLING = "05901234123457";
export const START = Date.parse("2026-11-22T10:00:00.000Z");
export const DEFAULT_POSTGRES_URL = "postgres://postgres@127.0.0.1:5432/test";

/** A SQLite file in a temporary directory, or a fresh schema of the PostgreSQL server at `postgresUrl`, migrated. */
export async function createDatabase(kind: StoreKind, postgresUrl: string): Promise<TestDatabase> {
  if (kind === "postgres") {
    const url = await createTestSchema(postgresUrl);
    await applyPostgresMigrations(url);
    return { url, drop: () => dropTestSchema(url) };
  }
  const directory = mkdtempSync(join(tmpdir(), "price-sim-"));
  return { url: `sqlite:${join(directory, "sim.db")}`, drop: async () => rmSync(directory, { recursive: true, force: true }) };
}

export async function openStore(database: TestDatabase, kind: StoreKind): Promise<Store> {
  if (kind === "sqlite") return SQLiteStore.open(database.url);
  return PostgresStore.connect(database.url);
}

export interface Instance {
  name: string;
  clock: FakeClock;
  /** The instance's own connection; a crash cuts it off. */
  store: Store;
  /** The store behind the cut-off switch, to stop what runs inside it when the instance crashes. */
  inner: Store;
  app: ReturnType<typeof createApp>;
  /** Its services, for the jobs it runs beside requests (the watch evaluator). */
  services: ReturnType<typeof createServices>;
  alive: boolean;
  /** The SQLite serve lock it holds (one serve per file); a crash lets go of it with the process. */
  serveLock: ServeLock | null;
  /** The reads waiting at the stall gate, each to be let go by an `unstall` step. */
  stalls: Array<() => void>;
}

/** An API key as the simulation knows it: its secret, its line (a key and its rotations) and the line's monthly cap. */
export interface SimKey {
  id: string;
  organizationId: string;
  clearKey: string;
  /** The first key of its line. */
  line: string;
  monthlyLimit: number | null;
  status: "ACTIVE" | "ROTATED" | "REVOKED";
}

export interface SimOrganization {
  id: string;
  keys: SimKey[];
  lowCreditThreshold: number;
  /** Its price watches that have not been deleted. */
  watches: string[];
}

export type RequestKind = "single" | "batch" | "head";

/** A look-up's request, which a retry under the same Idempotency-Key must send again unchanged. */
export interface LookUpShape {
  kind: RequestKind;
  organizationId: string;
  /** The GTINs asked (a single look-up asks one). */
  gtins: string[];
}

export interface Answer {
  status: number;
  requestId: string | null;
  creditsConsumed: number;
  creditsRemaining: number | null;
  billable: boolean;
  debitInDoubt: boolean;
  replayed: boolean;
  /** How many distinct GTINs it answered with a fresh offer (what it bills). */
  freshItems: number;
}

export interface SentRequest {
  id: number;
  shape: LookUpShape;
  key: SimKey;
  /** The key was rotated or revoked before the request was sent (and every instance had heard so). */
  retiredAtSend: boolean;
  idempotencyKey: string | null;
  instance: Instance;
  /** Waiting at the stall gate until an `unstall` step. */
  stalled: boolean;
  /**
   * Set on a look-up chosen to stall (never on its retries): called when its read of STALLING
   * reaches the stall gate, the first time only.
   */
  onStall: (() => void) | null;
  /** Set when the instance answered. */
  answer: Answer | null;
  settled: Promise<void>;
  /** The simulated time that had passed (World.elapsed) when it was sent, and when it was answered. */
  sentAt: number;
  answeredAt: number;
  /** Requests with the same Idempotency-Key stalled inside their work (holding its claim) when this one was sent. */
  blockedBy: SentRequest[];
  /** Those of them still running, on a live instance, when this one was answered. */
  stillBlockedBy: SentRequest[];
}

export interface Purchase {
  organizationId: string;
  orderId: string;
  sessionId: string;
  paymentIntent: string;
  credits: number;
  amount: number;
  /** Events the provider will send, in the order it made them; delivery picks among them. */
  pending: Array<{ id: string; payload: string }>;
  /** Money refunded so far (cents); a full refund or a lost dispute leaves none of its credits spendable. */
  refunded: number;
  dispute: "none" | "open" | "won";
}
