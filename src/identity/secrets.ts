import { randomBytes, createHash, timingSafeEqual } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync, chmodSync } from 'node:fs';

/**
 * Reads a secret from its file, or generates it once. Files holding secrets are mode 0600
 * (also repaired if a person loosened them).
 */
export function readOrCreateSecretFile(file: string, make: () => string): string {
  if (existsSync(file)) {
    chmodSync(file, 0o600);
    const value = readFileSync(file, 'utf8').trim();
    if (value.length > 0) return value;
  }
  const value = make();
  writeFileSync(file, `${value}\n`, { mode: 0o600, flag: 'w' });
  chmodSync(file, 0o600);
  return value;
}

/** Writes a secret given from outside (the environment) to its file, mode 0600. */
export function writeSecretFile(file: string, value: string): void {
  writeFileSync(file, `${value}\n`, { mode: 0o600, flag: 'w' });
  chmodSync(file, 0o600);
}

export const newAdminToken = () => `bdu_admin_${randomBytes(24).toString('base64url')}`;
export const newSigningSecret = () => randomBytes(48).toString('base64url');

/** Constant-time comparison (hashing first makes the lengths equal). */
export function safeEqual(a: string, b: string): boolean {
  const ha = createHash('sha256').update(a).digest();
  const hb = createHash('sha256').update(b).digest();
  return timingSafeEqual(ha, hb);
}
