import { Elysia } from "elysia";
import type { Services } from "../../../services";
import { requestLanguage } from "../../../http/request";
import { authPlugin } from "../../auth/plugin";
import { pageOf, TransactionSchema, TransactionsQuery } from "../model";
import { listTransactions, streamTransactionsCSV } from "../service";
import { wantsCSV } from "../negotiation";
import { READ_ERRORS, SESSION_OR_KEY } from "./common";

/** GET /api/v1/customer/billing/transactions. */
export function transactionsRoute(services: Services) {
  return new Elysia({ name: "billing.transactions" }).use(authPlugin(services)).get(
    "/transactions",
    ({ principal, query, request, set }) => {
      const language = requestLanguage(request);
      set.headers.vary = "Accept";
      if (!wantsCSV(query.format, request.headers.get("accept"))) return listTransactions(services, principal.organizationId, query, language);
      const csv = streamTransactionsCSV(services, principal.organizationId, query, language);
      set.headers["content-type"] = "text/csv; charset=utf-8";
      set.headers["content-disposition"] = 'attachment; filename="transactions.csv"';
      // A stream body: Elysia sends it as is (the 200 schema documents the JSON answer).
      return new Response(csv, { headers: set.headers as Record<string, string> }) as unknown as ReturnType<typeof listTransactions>;
    },
    {
      auth: "sessionOrKey",
      query: TransactionsQuery,
      response: { 200: pageOf(TransactionSchema), ...READ_ERRORS },
      detail: {
        summary: "Ledger transactions, newest first",
        description:
          "Filter by `type` and by creation time (`from` inclusive, `to` exclusive). Pages are stable while transactions are added. As CSV (`format=csv`, or `Accept: text/csv` preferred to JSON): every transaction the filters select from `cursor` on, `limit` ignored, newest first, streamed; the columns are the JSON fields, descriptions in the response language.",
        tags: ["Billing"],
        operationId: "listBillingTransactions",
        security: SESSION_OR_KEY,
        "x-alternative-content": {
          "200": {
            "text/csv": {
              schema: {
                type: "string",
                description: "RFC 4180 CSV with a header line: id,type,amount,balanceAfter,bucketId,keyId,requestId,gtin,description,createdAt",
              },
              example:
                "id,type,amount,balanceAfter,bucketId,keyId,requestId,gtin,description,createdAt\r\ntxn_0mwrd57q90000brqra5jtuxfecebe,usage,-1,41,bkt_0mwrd57q90000brqra5jtuxfecebe,key_0mwrd57q90000brqra5jtuxfecebe,req_0mwrd57q90000brqra5jtuxfecebe,04006381333931,Price look-up 04006381333931,2026-11-22T10:00:00.000Z\r\n",
            },
          },
        },
      },
    },
  );
}
