import { defaultHome } from '../../config.js';
import { serverUrl } from '../client.js';
import { relay } from './relay.js';

/** `beidou relay …`: the process the SessionStart hook starts (docs/claude-code.md). */
export async function relayCommand(opts: {
  socket: string;
  sessionId: string;
  tokenFile?: string;
  claudePid?: string;
  server?: string;
  home?: string;
  agent?: string;
}): Promise<void> {
  const token = process.env.BEIDOU_TOKEN ?? '';
  await relay({
    server: serverUrl(opts),
    tokenFile: opts.tokenFile ?? null,
    token,
    home: opts.home ?? defaultHome(),
    socket: opts.socket,
    sessionId: opts.sessionId,
    claudePid: opts.claudePid ? Number(opts.claudePid) : null,
    messagingToken: process.env.CLAUDE_CODE_MESSAGING_TOKEN || null,
    agentId: opts.agent ?? null,
  });
}
