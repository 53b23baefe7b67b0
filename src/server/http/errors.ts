import type { Response } from 'express';
import type { z } from 'zod';
import { DomainError, zodToInvalidInput, type ErrorCode } from '../../domain/errors.js';

/** Errors on /api: JSON `{error, message}` (plus `details` when useful) with a fitting status. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly details?: Record<string, unknown>,
  ) {
    super(message);
  }
}

const STATUS_BY_CODE: Partial<Record<ErrorCode, number>> = {
  invalid_input: 400,
  answer_count_mismatch: 400,
  unknown_skill: 400,
  unknown_agent: 404,
  unknown_recipient: 404,
  unknown_qid: 404,
  unknown_task: 404,
  recipient_terminated: 409,
  already_terminating: 409,
  inbox_full: 409,
  limit_exceeded: 429,
  rate_limited: 429,
  content_too_large: 413,
  internal_error: 500,
};

export function fromDomainError(err: DomainError): ApiError {
  return new ApiError(STATUS_BY_CODE[err.code] ?? 409, err.code, err.message, err.details);
}

export function sendError(res: Response, err: ApiError): void {
  // A refusal that says when to come back says it in HTTP's own words too.
  const retryAfter = err.details?.retry_after_s;
  if (typeof retryAfter === 'number') res.setHeader('Retry-After', String(retryAfter));
  res
    .status(err.status)
    .json({ error: err.code, message: err.message, ...(err.details ? { details: err.details } : {}) });
}

/** Parses a request body or query with a strict zod schema; failures are 400 naming the field. */
export function parseOr400<S extends z.ZodType>(schema: S, value: unknown): z.infer<S> {
  const parsed = schema.safeParse(value ?? {});
  if (!parsed.success) throw fromDomainError(zodToInvalidInput(parsed.error));
  return parsed.data;
}

export function toApiError(err: unknown): ApiError | null {
  if (err instanceof ApiError) return err;
  if (err instanceof DomainError) return fromDomainError(err);
  return null;
}
