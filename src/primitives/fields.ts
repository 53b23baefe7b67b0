import { z } from 'zod';

/**
 * Ids, roles and names an agent chooses become paths (a plan task id names its
 * `artifacts/` folder) and parts of prompts, so they are plain tokens: a letter or digit,
 * then letters, digits, `.`, `_`, `-`, 64 characters at most. Checked on input only, so
 * logs written before this rule still replay.
 */
export const NAME_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

const PATTERN_MESSAGE = 'must be 1 to 64 letters, digits, ".", "_" or "-", starting with a letter or digit';

/** An id, role or name the tool input supplies (or refers back to). */
export const nameField = () => z.string().regex(NAME_PATTERN, PATTERN_MESSAGE);
