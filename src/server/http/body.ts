import express, { type NextFunction, type Request, type Response } from 'express';
import { ApiError } from './errors.js';

/**
 * The JSON body parser, mounted after authentication on every route (never globally, see
 * `Authenticator.admit`): a request without a valid token is refused before a byte of its
 * body is read. Its failures are 4xx with stable codes, never a 500.
 */

const BODY_LIMIT = '4mb';
const parseJson = express.json({ limit: BODY_LIMIT, strict: false });

export function jsonBody(req: Request, res: Response, next: NextFunction): void {
  parseJson(req, res, (err?: unknown) => next(err === undefined ? undefined : bodyError(err)));
}

function bodyError(err: unknown): ApiError {
  const type = (err as { type?: string } | null)?.type;
  if (type === 'entity.parse.failed') return new ApiError(400, 'invalid_json', 'the request body is not valid JSON');
  if (type === 'entity.too.large')
    return new ApiError(413, 'payload_too_large', `the request body is over ${BODY_LIMIT}`);
  if (type === 'encoding.unsupported' || type === 'charset.unsupported') {
    return new ApiError(
      415,
      'unsupported_encoding',
      'send the body as UTF-8 JSON (Content-Encoding identity, gzip, deflate or br)',
    );
  }
  // A corrupt gzip/deflate/br stream (zlib errors), a length that does not match, an
  // aborted upload: the body could not be read as sent.
  return new ApiError(
    400,
    'invalid_body',
    'the request body could not be read (corrupt compression, or a length that does not match)',
  );
}

/**
 * A response sent while the request body is still unread ends the connection: the
 * client's remaining body would otherwise hold the socket (it may claim a megabyte and
 * send four bytes).
 */
export function closeIfBodyUnread(req: Request, res: Response): void {
  if (req.complete || res.headersSent) return;
  res.set('Connection', 'close');
  res.once('finish', () => req.socket.destroy());
}
