import { CommonErrors, ProblemSchema } from "../../../http/model";

export const NO_STORE = { "cache-control": "no-store" };

export const sessionErrors = { ...CommonErrors, 401: ProblemSchema, 403: ProblemSchema };
