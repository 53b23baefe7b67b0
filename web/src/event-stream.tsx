import { useLayoutEffect, useMemo, useRef, useState } from 'preact/hooks';
import { describeEvent, type Namer } from '../../src/events/describe.js';
import { clock } from './format.js';
import type { Agent, StoredEvent } from './types.js';

/**
 * The task's events as they arrive, one sentence each (the sentences of `beidou tail`,
 * src/events/describe.ts), filtered by agent and by event type; a click shows the whole
 * event as JSON. It follows the newest line while the view is at the bottom, and stays put
 * while the user reads further up.
 */

/** Lines rendered at most: the newest that match the filters. */
const SHOWN = 1_000;

/** Whether an event names the agent anywhere (caller, recipient, leader, asker, a list of ids...). */
function involves(e: StoredEvent, agentId: string): boolean {
  return Object.entries(e).some(
    ([k, v]) => k !== 'task_id' && (v === agentId || (Array.isArray(v) && v.includes(agentId))),
  );
}

export function EventStream({
  events,
  agents,
  name,
  state,
}: {
  events: StoredEvent[];
  agents: Agent[];
  name: Namer;
  state: string | null;
}) {
  const [agent, setAgent] = useState('');
  const [type, setType] = useState('');
  const [open, setOpen] = useState<ReadonlySet<number>>(new Set());
  const box = useRef<HTMLDivElement>(null);
  const stick = useRef(true);

  const types = useMemo(() => [...new Set<string>(events.map((e) => e.event))].sort(), [events.length]);
  const matching = events.filter((e) => (!type || e.event === type) && (!agent || involves(e, agent)));
  const shown = matching.length > SHOWN ? matching.slice(-SHOWN) : matching;

  useLayoutEffect(() => {
    const el = box.current;
    if (el && stick.current) el.scrollTop = el.scrollHeight;
  });

  const toggle = (seq: number) => {
    // Opening a line above the newest: keep it where it is rather than jump to the bottom.
    if (seq !== shown.at(-1)?.seq) stick.current = false;
    setOpen((s) => {
      const next = new Set(s);
      if (!next.delete(seq)) next.add(seq);
      return next;
    });
  };

  return (
    <div class="events">
      <div class="toolbar">
        <label>
          Agent{' '}
          <select data-testid="event-filter-agent" value={agent} onChange={(e) => setAgent(e.currentTarget.value)}>
            <option value="">all agents</option>
            {agents.map((a) => (
              <option key={a.agent_id} value={a.agent_id}>
                {a.name}
              </option>
            ))}
          </select>
        </label>
        <label>
          Event{' '}
          <select data-testid="event-filter-type" value={type} onChange={(e) => setType(e.currentTarget.value)}>
            <option value="">all events</option>
            {(type && !types.includes(type) ? [type, ...types] : types).map((t) => (
              <option key={t} value={t}>
                {t}
              </option>
            ))}
          </select>
        </label>
        <span class="muted grow-right" data-testid="event-count">
          {shown.length === matching.length
            ? `${shown.length} of ${events.length} events`
            : `${shown.length} of ${matching.length} matching events`}
        </span>
        {state && <span class="stream-note">{state}</span>}
      </div>
      <div
        class="event-box"
        data-testid="event-stream"
        ref={box}
        onScroll={(e) => {
          const el = e.currentTarget;
          stick.current = el.scrollTop + el.clientHeight >= el.scrollHeight - 24;
        }}
      >
        {shown.length === 0 && (
          <p class="muted pad">{events.length === 0 ? 'No events yet.' : 'No event matches the filters.'}</p>
        )}
        {shown.map((e) => (
          <EventLine key={e.seq} event={e} name={name} open={open.has(e.seq)} toggle={toggle} />
        ))}
      </div>
    </div>
  );
}

function EventLine({
  event: e,
  name,
  open,
  toggle,
}: {
  event: StoredEvent;
  name: Namer;
  open: boolean;
  toggle: (seq: number) => void;
}) {
  return (
    <div
      class={`event-line${open ? ' open' : ''} e-${e.event.replace(/[._]/g, '-')}`}
      data-testid="event-line"
      data-seq={e.seq}
      data-event={e.event}
    >
      {/* biome-ignore lint/a11y/noStaticElementInteractions: a click anywhere on the row is a mouse shortcut for the row's {} button, which keyboard users reach (Tab, Enter/Space) and which toggles the same details */}
      {/* biome-ignore lint/a11y/useKeyWithClickEvents: the keyboard path is the row's {} button (a real <button> with aria-expanded), which toggles the same details */}
      <div class="event-row" onClick={() => toggle(e.seq)}>
        <span class="seq">{e.seq}</span>
        <time>{clock(e.ts)}</time>
        <span class="sentence">{describeEvent(e, name)}</span>
        <button
          type="button"
          class="json-toggle"
          data-testid="event-json-toggle"
          aria-expanded={open}
          title={open ? 'hide the JSON' : 'show the event as JSON'}
          onClick={(ev) => {
            ev.stopPropagation();
            toggle(e.seq);
          }}
        >
          {'{}'}
        </button>
      </div>
      {open && <pre data-testid="event-json">{JSON.stringify(e, null, 2)}</pre>}
    </div>
  );
}
