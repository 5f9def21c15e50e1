import { CommonErrors, ProblemSchema } from "../../../http/model";

export const READ_ERRORS = { ...CommonErrors, 401: ProblemSchema, 503: ProblemSchema } as const;

export const WRITE_ERRORS = { ...CommonErrors, 401: ProblemSchema, 403: ProblemSchema, 409: ProblemSchema, 503: ProblemSchema } as const;

export const SESSION_OR_KEY: Array<Record<string, string[]>> = [{ session: [] }, { apiKey: [] }];

export const SESSION: Array<Record<string, string[]>> = [{ session: [] }];
