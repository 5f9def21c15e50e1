import { hashRequestBody, type IdempotencyRecorder, withIdempotency } from "../../http/idempotency";
import { Problem } from "../../http/problem";
import { answerOf, type LookedUp, type PriceAnswer, type PriceCall } from "./answer";
import { fingerprintOf, type Lookup } from "./parse";
import { lookUpPrices, type PriceLookupResult } from "./service";

const ROUTES = { single: "GET /products/price", batch: "POST /products/prices" } as const;

/**
 * Looks the request's GTINs up (reserve → read → debit or release, see lookUpPrices) and answers
 * it; under an Idempotency-Key at most once within 24 h, a retry getting the stored answer.
 */
export async function lookUp(call: PriceCall, lookup: Lookup, limitHeaders: Record<string, string>): Promise<LookedUp> {
  if (lookup.idempotencyKey === null) {
    const result = await lookUpLogged(call, lookup);
    return { answer: answerOf(call, lookup, result, limitHeaders), result, replayed: false };
  }
  const { store, clock } = call.services;
  const scope = `${call.key.organizationId}:${ROUTES[lookup.kind]}`;
  const request = { scope, key: lookup.idempotencyKey, requestHash: hashRequestBody(fingerprintOf(lookup)), now: clock.now() };
  try {
    const { body, replayed } = await withIdempotency(store, request, (recorder) => lookUpRecorded(call, lookup, limitHeaders, recorder));
    return { answer: body, result: null, replayed };
  } catch (error) {
    // The Idempotency-Key's own refusals (another request, still running) carry no meta yet.
    if (!(error instanceof Problem) || "meta" in error.extensions) throw error;
    const creditsRemaining = await store.availableCredits(call.key.organizationId, clock.now());
    throw error.with({ extensions: { meta: { reason: "idempotency-conflict", creditsRemaining } } });
  }
}

/** A billed answer is stored in the debit's own transaction, so the two can never part. */
async function lookUpRecorded(call: PriceCall, lookup: Lookup, limitHeaders: Record<string, string>, recorder: IdempotencyRecorder) {
  const sealed = new Map<PriceLookupResult, PriceAnswer>();
  const result = await lookUpLogged(call, lookup, async (billed) => {
    const answer = answerOf(call, lookup, billed, limitHeaders);
    if (answer instanceof Problem) throw answer;
    sealed.set(billed, answer);
    return { scope: recorder.scope, keyHash: recorder.keyHash, claimedAt: recorder.claimedAt, responseStatus: 200, responseBody: await recorder.seal(answer) };
  });
  // The sealed answer stands only if its debit committed (the look-up then returns the very result
  // it sealed); otherwise the result is the 503.
  const answer = sealed.get(result) ?? answerOf(call, lookup, result, limitHeaders);
  if (answer instanceof Problem) throw answer;
  return { status: 200, body: answer, recorded: sealed.has(result) };
}

/** The look-up; a debit in doubt is logged, for the operator who reconciles it with the ledger. */
async function lookUpLogged(call: PriceCall, lookup: Lookup, recordAnswer?: Parameters<typeof lookUpPrices>[1]["recordAnswer"]): Promise<PriceLookupResult> {
  const { services, key, requestId } = call;
  const result = await lookUpPrices(call.deps, { credential: key, gtins: lookup.gtins, language: lookup.language, requestId, recordAnswer });
  if (result.debitInDoubt) services.logger.warn("debit in doubt", { requestId, organizationId: key.organizationId });
  return result;
}
