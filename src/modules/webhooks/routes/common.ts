import { CommonErrors, ProblemSchema } from "../../../http/model";

export const NO_STORE = { "cache-control": "no-store" };

export const TAG = "Webhook endpoints";

export const security = [{ session: [] }];

export const sessionErrors = { ...CommonErrors, 401: ProblemSchema, 403: ProblemSchema };
