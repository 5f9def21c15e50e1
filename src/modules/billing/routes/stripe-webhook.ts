import { Elysia, t } from "elysia";
import type { Services } from "../../../services";
import { ProblemSchema } from "../../../http/model";
import { Problem } from "../../../http/problem";
import { WebhookResponse } from "../model";

/** POST /api/v1/webhooks/stripe: the payment provider's events, when it is Stripe. */
export function stripeWebhookRoutes(services: Services) {
  return new Elysia({ name: "billing.webhooks" }).post(
    "/api/v1/webhooks/stripe",
    async ({ request }) => {
      const { payments } = services;
      if (payments.receiveWebhook === undefined)
        throw new Problem("not-found", {
          detail: { en: "Stripe is not the payment provider of this service.", fr: "Stripe n'est pas le prestataire de paiement de ce service." },
        });
      // The signature covers the exact bytes Stripe sent: read them raw, never a re-serialized parse.
      return payments.receiveWebhook(await request.text(), request.headers.get("stripe-signature"));
    },
    {
      parse: "none",
      headers: t.Object({ "stripe-signature": t.Optional(t.String({ description: "Stripe's signature of the raw body" })) }),
      response: { 200: WebhookResponse, 400: ProblemSchema, 404: ProblemSchema, 413: ProblemSchema, 500: ProblemSchema, 503: ProblemSchema },
      detail: {
        summary: "Stripe webhook",
        description:
          "Signature-verified with STRIPE_WEBHOOK_SECRET. Applies checkout.session.completed, checkout.session.async_payment_succeeded, invoice.paid and charge.refunded, each event exactly once; other events are acknowledged. A bad signature is 400.",
        tags: ["Webhooks"],
        operationId: "receiveStripeWebhook",
        security: [],
      },
    },
  );
}
