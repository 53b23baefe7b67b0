import { useEffect, useState } from 'preact/hooks';
import type { PendingQuestion, TaskItem } from './types.js';

/**
 * The page's shared state: the token, what the live streams last said, which streams are
 * connected, the pending confirmation and the toasts. One small observable object; the
 * components read it through `useStore` and keep their own form state themselves.
 */

export interface Confirmation {
  id: number;
  message: string;
  ok: string;
  resolve: (ok: boolean) => void;
}

export interface Toast {
  id: number;
  text: string;
  kind: 'ok' | 'error';
}

export interface State {
  token: string | null;
  /** Why the last token was dropped (shown by the sign-in form). */
  signInError: string | null;
  version: string | null;
  tasks: TaskItem[] | null;
  questions: PendingQuestion[] | null;
  /** Each open stream, by name: connected or not. */
  streams: Record<string, boolean>;
  confirmation: Confirmation | null;
  toasts: Toast[];
  newTaskOpen: boolean;
}

const TOKEN_KEY = 'beidou.token';

/**
 * The admin token is kept for the tab (sessionStorage): it survives a reload, and is gone
 * when the tab closes, rather than staying on the disk for ever. A copy an earlier version
 * kept in localStorage is removed.
 */
function storedToken(): string | null {
  try {
    localStorage.removeItem(TOKEN_KEY);
  } catch {
    // no storage: nothing kept
  }
  try {
    return sessionStorage.getItem(TOKEN_KEY);
  } catch {
    return null;
  }
}

let state: State = {
  token: storedToken(),
  signInError: null,
  version: null,
  tasks: null,
  questions: null,
  streams: {},
  confirmation: null,
  toasts: [],
  newTaskOpen: false,
};
const listeners = new Set<() => void>();

export function getState(): State {
  return state;
}

export function setState(patch: Partial<State> | ((s: State) => Partial<State>)): void {
  state = { ...state, ...(typeof patch === 'function' ? patch(state) : patch) };
  for (const l of listeners) l();
}

export function useStore(): State {
  const [, rerender] = useState(0);
  useEffect(() => {
    const l = () => rerender((n) => n + 1);
    listeners.add(l);
    return () => void listeners.delete(l);
  }, []);
  return state;
}

export function signIn(token: string): void {
  try {
    sessionStorage.setItem(TOKEN_KEY, token);
  } catch {
    // A browser without storage still works for this tab.
  }
  setState({ token, signInError: null });
}

export function signOut(reason: string | null = null): void {
  try {
    sessionStorage.removeItem(TOKEN_KEY);
  } catch {
    // nothing stored
  }
  setState({ token: null, signInError: reason, tasks: null, questions: null, streams: {} });
}

export function setStream(name: string, connected: boolean | null): void {
  setState((s) => {
    const streams = { ...s.streams };
    if (connected === null) delete streams[name];
    else streams[name] = connected;
    return { streams };
  });
}

let nextId = 1;

/** Asks the user through the one confirmation dialog; a second request replaces (and refuses) the first. */
export function confirmAction(message: string, ok = 'Confirm'): Promise<boolean> {
  return new Promise((resolve) => {
    state.confirmation?.resolve(false);
    setState({ confirmation: { id: nextId++, message, ok, resolve } });
  });
}

export function settleConfirmation(ok: boolean): void {
  const c = state.confirmation;
  if (!c) return;
  setState({ confirmation: null });
  c.resolve(ok);
}

const TOAST_MS = 5_000;

export function toast(text: string, kind: Toast['kind'] = 'ok'): void {
  const id = nextId++;
  setState((s) => ({ toasts: [...s.toasts.slice(-3), { id, text, kind }] }));
  setTimeout(() => setState((s) => ({ toasts: s.toasts.filter((t) => t.id !== id) })), TOAST_MS);
}
