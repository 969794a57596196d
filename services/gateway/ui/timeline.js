// A session's timeline as the console holds it: the durable events and
// state events it has read (history pages and the live stream), in
// sequence order and each once, and the live deltas of messages still
// streaming. items() derives what the page shows from them.

// Update types that change the session's header or panels rather than add
// to the conversation.
const quietTypes = new Set([
  'usage_update', 'available_commands_update', 'current_mode_update',
  'config_option_update', 'session_info_update',
]);

const roles = {
  user_message_chunk: 'user',
  agent_message_chunk: 'agent',
  agent_thought_chunk: 'thought',
};

export class Timeline {
  constructor() {
    this.entries = []; // {kind: 'durable'|'state', seq, data}, sorted by order()
    this.keys = new Set(); // kind:seq of every entry
    this.deltas = []; // {type, messageId, after, text}
    this.hasMoreBefore = false;
    this.newest = 0; // the newest durable sequence held
  }

  // add stores one event; it returns false for one already held.
  add(kind, data) {
    const key = kind + ':' + data.sequence;
    if (this.keys.has(key)) return false;
    this.keys.add(key);
    const e = { kind, seq: data.sequence, data };
    const o = order(e);
    let i = this.entries.length;
    while (i > 0 && order(this.entries[i - 1]) > o) i--;
    this.entries.splice(i, 0, e);
    if (kind === 'durable') {
      this.newest = Math.max(this.newest, e.seq);
      if (data.messageId && roles[data.type]) {
        // The durable message holds the deltas sent before it.
        this.deltas = this.deltas.filter((d) => d.messageId !== data.messageId || d.after >= e.seq);
      }
    }
    return true;
  }

  // addPage stores a history page's events (durable, and state entries,
  // type session_state).
  addPage(events) {
    for (const ev of events) this.add(ev.type === 'session_state' ? 'state' : 'durable', ev);
  }

  // oldest is the sequence of the oldest entry held, the cursor of the
  // page before it.
  oldest() {
    return this.entries.length ? this.entries[0].seq : 0;
  }

  addDelta(ev) {
    const text = ev.content && ev.content.type === 'text' ? ev.content.text : '';
    this.deltas.push({ type: ev.type, messageId: ev.messageId || '', after: ev.afterSequence || 0, text });
  }

  // dropDeltas forgets every live delta: a cancelled or failed turn's
  // streamed text never became durable, and every viewer drops it.
  dropDeltas() {
    this.deltas = [];
  }

  // items derives the conversation from the entries and deltas.
  items() {
    const items = [];
    const byKey = new Map();
    let plan = null;
    let last = null;
    // Message IDs are the agent's, unique only within one agent process:
    // a restored agent numbers its messages anew. They key a message
    // within its turn, counted by the user's messages.
    let turn = 0;
    let userMessage = null;
    // byKey finds an item by what later events name it by; item.key, the
    // page's key for it, is the sequence of its first event, which stays
    // the same as older pages are read.
    const push = (item, lookup) => {
      items.push(item);
      if (lookup) byKey.set(lookup, item);
      last = item;
      return item;
    };
    for (const e of this.entries) {
      const d = e.data;
      if (e.kind === 'state') {
        const item = stateItem(d);
        if (item) push(item, '');
        continue;
      }
      const role = roles[d.type];
      if (role) {
        const origin = d._meta && d._meta['skein.dev/origin'];
        const r = role === 'user' && origin === 'agent' ? 'replay' : role;
        if (r === 'user' && (!d.messageId || d.messageId !== userMessage)) {
          turn++;
          userMessage = d.messageId || null;
          plan = null;
        }
        const lookup = d.messageId ? 'msg:' + turn + ':' + d.messageId : '';
        let item = lookup ? byKey.get(lookup) : null;
        if (!item && !d.messageId && last && last.kind === 'message' && last.role === r && last.anonymous) item = last;
        if (!item) {
          item = push({ kind: 'message', key: 'seq:' + e.seq, role: r, anonymous: !d.messageId, text: '', live: '', seq: e.seq, lastSeq: 0 }, lookup);
        }
        if (d.principal) item.principal = d.principal; // who sent a user's message
        item.text += contentText(d.content);
        item.lastSeq = e.seq;
        continue;
      }
      switch (d.type) {
        case 'tool_call':
        case 'tool_call_update': {
          // Tool call IDs too are the agent's, unique within a turn.
          const lookup = 'tool:' + turn + ':' + d.toolCallId;
          let item = byKey.get(lookup);
          if (!item) item = push({ kind: 'tool', key: 'seq:' + e.seq, seq: e.seq, toolCallId: d.toolCallId }, lookup);
          for (const f of ['title', 'status', 'content', 'locations', 'rawInput', 'rawOutput']) {
            if (d[f] !== undefined && d[f] !== null) item[f] = d[f];
          }
          if (d.kind) item.toolKind = d.kind; // ACP's tool kind: read, edit, execute, …
          break;
        }
        case 'plan':
          if (plan) plan.entries = d.entries || [];
          else plan = push({ kind: 'plan', key: 'seq:' + e.seq, seq: e.seq, entries: d.entries || [] });
          break;
        case 'permission_request':
          push({ kind: 'permission', key: 'seq:' + e.seq, seq: e.seq, requestId: d.requestId, toolCall: d.toolCall || {}, options: d.options || [], resolved: null }, 'perm:' + d.requestId);
          break;
        case 'input_request':
          push({ kind: 'input', key: 'seq:' + e.seq, seq: e.seq, requestId: d.requestId, message: d.message || '', schema: d.requestedSchema || {}, resolved: null }, 'input:' + d.requestId);
          break;
        case 'permission_response':
        case 'input_response': {
          const prefix = d.type === 'permission_response' ? 'perm:' : 'input:';
          const item = byKey.get(prefix + d.requestId);
          if (item) item.resolved = d;
          break;
        }
        default:
          if (!quietTypes.has(d.type)) push({ kind: 'other', key: 'seq:' + e.seq, seq: e.seq, type: d.type, data: d }, '');
      }
    }
    for (const dl of this.deltas) {
      const role = roles[dl.type] || 'agent';
      const lookup = dl.messageId ? 'msg:' + turn + ':' + dl.messageId : 'live:' + role;
      let item = byKey.get(lookup);
      if (!item) item = push({ kind: 'message', key: 'live:' + lookup, role, anonymous: !dl.messageId, text: '', live: '', seq: 0, lastSeq: 0 }, lookup);
      if (dl.after >= item.lastSeq) item.live += dl.text;
    }
    return items;
  }
}

// order sorts entries by sequence, a state entry just before the durable
// event of the same sequence (the event that caused it).
function order(e) {
  return e.seq * 2 + (e.kind === 'durable' ? 1 : 0);
}

function stateItem(d) {
  switch (d.change) {
    case 'turn_finished':
      return { kind: 'turn', key: 'state:' + d.sequence, seq: d.sequence, stopReason: d.stopReason || '', error: d.error || null };
    case 'unloaded':
      return { kind: 'note', key: 'state:' + d.sequence, seq: d.sequence, text: 'The agent was unloaded; the next prompt restores it.' };
    case 'adapter_exited':
      return { kind: 'note', key: 'state:' + d.sequence, seq: d.sequence, text: 'The agent exited.' };
    default:
      return null;
  }
}

// contentText is what a content block shows as text.
export function contentText(c) {
  if (!c) return '';
  switch (c.type) {
    case 'text':
      return c.text || '';
    case 'resource_link':
      return '[' + (c.name || c.uri || 'file') + ']';
    case 'resource':
      return c.resource && typeof c.resource.text === 'string' ? c.resource.text : '[' + ((c.resource && c.resource.uri) || 'resource') + ']';
    default:
      return '[' + c.type + ']';
  }
}
