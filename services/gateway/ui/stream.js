// The live event stream of one session, read with fetch() and a stream
// reader rather than EventSource, which cannot send the Authorization
// header. It follows the protocol every reader follows (docs/API.md, The SSE
// stream): resume with Last-Event-ID after any drop, and dedupe by (event
// kind, sequence), so that a network drop or a gateway restart shows nothing
// twice and loses nothing durable.

import { authHeaders, sessionPath } from './api.js';

// Codes after which reconnecting cannot help: the stream stops and says why.
const fatalCodes = new Set([
  'unauthenticated', 'forbidden', 'session_not_found', 'invalid_cursor',
  'cursor_expired', 'invalid_request', 'invalid_session_id',
]);

// An open stream carries a keepalive comment every 15 s: one silent for
// longer than this has lost its connection without being told.
const silenceMs = 45000;
const minDelayMs = 250;
const maxDelayMs = 5000;

export class EventStream {
  // after is the newest durable sequence the caller already holds; the
  // stream delivers what follows it. handlers: durable(ev), state(ev),
  // ephemeral(ev), status(status, error), with status one of connecting,
  // live, reconnecting, failed.
  constructor(sessionId, after, handlers) {
    this.sessionId = sessionId;
    this.last = after; // the Last-Event-ID: the newest sequence received with an id
    this.handlers = handlers;
    this.stopped = false;
    this.ctrl = null;
    // The sequences of state events received without an id (those sent
    // just before the durable event of the same sequence): a reconnect
    // before that durable event replays them.
    this.seenState = new Set();
    this.fatal = null;
  }

  start() {
    this.run();
    return this;
  }

  stop() {
    this.stopped = true;
    if (this.ctrl) this.ctrl.abort();
  }

  async run() {
    let delay = minDelayMs;
    this.handlers.status('connecting');
    while (!this.stopped) {
      this.ctrl = new AbortController();
      try {
        const resp = await fetch(sessionPath(this.sessionId, '/events'), {
          headers: { ...authHeaders(), Accept: 'text/event-stream', 'Last-Event-ID': String(this.last) },
          credentials: 'omit',
          cache: 'no-store',
          signal: this.ctrl.signal,
        });
        if (!resp.ok) {
          const err = await responseError(resp);
          if (fatalCodes.has(err.code)) this.fatal = err;
          throw err;
        }
        delay = minDelayMs;
        this.handlers.status('live');
        await this.read(resp.body);
      } catch (err) {
        if (!this.stopped && !this.fatal && err.name !== 'AbortError') {
          console.debug('event stream dropped:', err.message);
        }
      }
      if (this.stopped) return;
      if (this.fatal) {
        this.handlers.status('failed', this.fatal);
        return;
      }
      this.handlers.status('reconnecting');
      await new Promise((resolve) => setTimeout(resolve, delay));
      delay = Math.min(delay * 2, maxDelayMs);
    }
  }

  // read parses the text/event-stream body until it ends.
  async read(body) {
    const reader = body.getReader();
    const decoder = new TextDecoder();
    let buf = '';
    let ev = newEvent();
    let watchdog = this.watch();
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return;
        clearTimeout(watchdog);
        watchdog = this.watch();
        buf += decoder.decode(value, { stream: true });
        let nl;
        while ((nl = buf.indexOf('\n')) >= 0) {
          const line = buf.slice(0, nl).replace(/\r$/, '');
          buf = buf.slice(nl + 1);
          if (line === '') {
            this.dispatch(ev);
            ev = newEvent();
            if (this.fatal || this.stopped) return;
            continue;
          }
          if (line[0] === ':') continue; // a comment: the keepalive
          const colon = line.indexOf(':');
          const field = colon < 0 ? line : line.slice(0, colon);
          const val = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
          if (field === 'event') ev.event = val;
          else if (field === 'data') ev.data.push(val);
          else if (field === 'id') ev.id = val;
        }
      }
    } finally {
      clearTimeout(watchdog);
      reader.cancel().catch(() => {});
    }
  }

  watch() {
    return setTimeout(() => this.ctrl && this.ctrl.abort(), silenceMs);
  }

  // dispatch delivers one parsed event, unless it is one already delivered.
  dispatch(ev) {
    if (ev.data.length === 0) return;
    let data;
    try {
      data = JSON.parse(ev.data.join('\n'));
    } catch {
      console.warn('event stream: an event that is not JSON was dropped');
      return;
    }
    const id = ev.id === null ? null : Number(ev.id);
    switch (ev.event) {
      case 'durable':
        if (data.sequence > this.last) this.handlers.durable(data);
        break;
      case 'state':
        if (data.sequence > this.last && !this.seenState.has(data.sequence)) {
          if (id === null) this.seenState.add(data.sequence);
          this.handlers.state(data);
        }
        break;
      case 'ephemeral':
        this.handlers.ephemeral(data);
        break;
      case 'error': {
        const e = (data && data.error) || {};
        if (fatalCodes.has(e.code)) this.fatal = Object.assign(new Error(e.message || e.code), { code: e.code });
        // An error event ends the stream: the server closes it next.
        break;
      }
      default:
        break; // a kind this console does not know yet
    }
    if (id !== null && Number.isFinite(id) && id > this.last) {
      this.last = id;
      for (const s of this.seenState) if (s <= id) this.seenState.delete(s);
    }
  }
}

function newEvent() {
  return { event: 'message', data: [], id: null };
}

async function responseError(resp) {
  let e = {};
  try {
    e = (await resp.json()).error || {};
  } catch {
    e = {};
  }
  return Object.assign(new Error(e.message || resp.statusText), { code: e.code || 'http_' + resp.status, status: resp.status });
}
