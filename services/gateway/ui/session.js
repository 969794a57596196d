// One session's page: its header (state, usage, timing, actions), its
// config options, its conversation from history then live, paging back on
// demand, and the prompt box.

import { useCallback, useEffect, useLayoutEffect, useRef, useState } from './vendor/hooks.js';
import { api, ApiError, randomID, sessionPath } from './api.js';
import { EventStream } from './stream.js';
import { contentText, Timeline } from './timeline.js';
import { html, Item } from './items.js';
import { formatTiming, formatUsage, relativeTime } from './render.js';
import { askToNotify, canAskToNotify, notifyNeeded } from './notify.js';

// The size of a history page, first and older.
const pageSize = 200;

// Update types after which the session's header is read again. The
// user's message is the turn's acceptance: the session is running.
const headerTypes = new Set([
  'user_message_chunk', 'usage_update', 'session_info_update', 'permission_request', 'permission_response',
  'input_request', 'input_response', 'config_option_update', 'current_mode_update',
]);

// includeState says whether history pages carry state entries
// (?include=state). A gateway that predates them refuses the parameter,
// and the console then reads history without it.
let includeState = true;

async function readHistory(id, cursor) {
  const base = sessionPath(id, '/history?limit=' + pageSize + (cursor ? '&before=' + cursor : ''));
  if (includeState) {
    try {
      return await api('GET', base + '&include=state');
    } catch (e) {
      if (!(e instanceof ApiError && e.code === 'invalid_request')) throw e;
      includeState = false;
    }
  }
  return api('GET', base);
}

export function SessionView({ id, onChanged, navigate }) {
  const [info, setInfo] = useState(null);
  const [error, setError] = useState(null);
  const [, setVersion] = useState(0);
  const [conn, setConn] = useState({ status: 'connecting' });
  const [loadingOlder, setLoadingOlder] = useState(false);
  const [config, setConfig] = useState(null);
  const [busy, setBusy] = useState(false);
  const [notice, setNotice] = useState('');
  const timeline = useRef(null);
  const logRef = useRef(null);
  const stick = useRef(true); // the log is scrolled to its end: keep it there
  const anchor = useRef(null); // the scroll position to keep across a prepended page
  const frame = useRef(0);
  const refreshTimer = useRef(0);
  const loading = useRef(false); // a page of older history is on its way
  const titleRef = useRef(''); // the session's title, for a notification
  titleRef.current = (info && info.title) || '';

  // bump re-renders once per frame however many events arrived.
  const bump = useCallback(() => {
    if (frame.current) return;
    frame.current = requestAnimationFrame(() => {
      frame.current = 0;
      setVersion((v) => v + 1);
    });
  }, []);

  const refresh = useCallback(async () => {
    try {
      setInfo(await api('GET', sessionPath(id)));
    } catch (e) {
      setError(e);
    }
  }, [id]);

  const refreshConfig = useCallback(async () => {
    try {
      setConfig(await api('GET', sessionPath(id, '/config')));
    } catch {
      setConfig(null);
    }
  }, [id]);

  // refreshSoon reads the header again once a burst of events is over.
  const refreshSoon = useCallback(() => {
    clearTimeout(refreshTimer.current);
    refreshTimer.current = setTimeout(() => {
      refresh();
      onChanged();
    }, 150);
  }, [refresh, onChanged]);

  useEffect(() => {
    const tl = new Timeline();
    timeline.current = tl;
    stick.current = true;
    setInfo(null);
    setError(null);
    setConfig(null);
    setNotice('');
    let stream = null;
    let live = true;
    (async () => {
      try {
        const [s, page] = await Promise.all([api('GET', sessionPath(id)), readHistory(id, 0)]);
        if (!live) return;
        setInfo(s);
        tl.addPage(page.events);
        tl.hasMoreBefore = page.hasMoreBefore;
        bump();
        const after = tl.entries.reduce((m, e) => Math.max(m, e.seq), 0);
        stream = new EventStream(id, after, {
          durable(ev) {
            if (!tl.add('durable', ev)) return;
            if (ev.type === 'permission_request') notifyNeeded(id, titleRef.current, 'The agent asks for permission.');
            if (ev.type === 'input_request') notifyNeeded(id, titleRef.current, 'The agent asks for input.');
            if (headerTypes.has(ev.type)) refreshSoon();
            if (ev.type === 'config_option_update' || ev.type === 'current_mode_update') refreshConfig();
            bump();
          },
          state(ev) {
            if (!tl.add('state', ev)) return;
            if (ev.discardDeltas) tl.dropDeltas();
            setInfo((i) => (i ? { ...i, state: { ...i.state, status: ev.status } } : i));
            refreshSoon();
            bump();
          },
          ephemeral(ev) {
            tl.addDelta(ev);
            bump();
          },
          status(status, err) {
            setConn({ status, error: err });
          },
        }).start();
      } catch (e) {
        if (live) setError(e);
      }
    })();
    refreshConfig();
    return () => {
      live = false;
      if (stream) stream.stop();
      clearTimeout(refreshTimer.current);
    };
  }, [id]);

  const loadOlder = useCallback(async () => {
    const tl = timeline.current;
    if (!tl || !tl.hasMoreBefore || loading.current) return;
    loading.current = true;
    setLoadingOlder(true);
    try {
      const page = await readHistory(id, tl.oldest());
      if (timeline.current !== tl) return;
      const el = logRef.current;
      anchor.current = el ? { height: el.scrollHeight, top: el.scrollTop } : null;
      tl.addPage(page.events);
      tl.hasMoreBefore = page.hasMoreBefore;
      setVersion((v) => v + 1);
    } catch (e) {
      setNotice('Could not read older history: ' + e.message);
    } finally {
      loading.current = false;
      setLoadingOlder(false);
    }
  }, [id]);

  // After each render: keep the reader's place when older events were put
  // above it, or follow the end when the reader was there.
  useLayoutEffect(() => {
    const el = logRef.current;
    if (!el) return;
    if (anchor.current) {
      el.scrollTop = anchor.current.top + (el.scrollHeight - anchor.current.height);
      anchor.current = null;
    } else if (stick.current) {
      el.scrollTop = el.scrollHeight;
    }
  });

  const onScroll = () => {
    const el = logRef.current;
    stick.current = el.scrollHeight - el.scrollTop - el.clientHeight < 40;
    if (el.scrollTop < 200) loadOlder();
  };

  const act = async (label, fn) => {
    setNotice('');
    try {
      await fn();
    } catch (e) {
      setNotice(label + ': ' + describe(e));
    }
    refreshSoon();
  };

  const prompt = async (text) => {
    setBusy(true);
    setNotice('');
    stick.current = true;
    try {
      const r = await api('POST', sessionPath(id, '/prompt'), {
        idempotencyKey: 'console-' + randomID(16),
        content: [{ type: 'text', text }],
      });
      if (r && r.stopReason === 'cancelled') timeline.current.dropDeltas();
      bump();
      return true;
    } catch (e) {
      // A failed turn's streamed text never became durable: drop it.
      if (e instanceof ApiError && e.status >= 500) timeline.current.dropDeltas();
      setNotice('Prompt: ' + describe(e));
      bump();
      return e instanceof ApiError && e.code === 'session_busy' ? false : true;
    } finally {
      setBusy(false);
      refreshSoon();
    }
  };

  // queuePrompt puts text in the session's queue while a turn runs: it
  // runs as its own turn when the turns before it end (docs/API.md, The
  // prompt queue). The answer comes at once.
  const queuePrompt = async (text) => {
    setNotice('');
    try {
      await api('POST', sessionPath(id, '/prompt'), {
        idempotencyKey: 'console-' + randomID(16),
        content: [{ type: 'text', text }],
        queue: true,
      });
      return true;
    } catch (e) {
      setNotice('Queue: ' + describe(e));
      return false;
    } finally {
      refreshSoon();
    }
  };

  const answerPermission = async (requestId, optionId) => {
    const r = await api('POST', sessionPath(id, '/permissions/' + encodeURIComponent(requestId)), { optionId });
    if (r.status !== 'accepted') throw new Error(notPending(r));
  };

  const answerInput = async (requestId, action, content) => {
    const body = content === undefined ? { action } : { action, content };
    const r = await api('POST', sessionPath(id, '/inputs/' + encodeURIComponent(requestId)), body);
    if (r.status !== 'accepted') throw new Error(notPending(r));
  };

  if (error) {
    return html`<div class="main-pane"><div class="error banner" data-role="error">${describe(error)}</div></div>`;
  }
  const tl = timeline.current;
  const items = tl ? tl.items() : [];
  const state = (info && info.state) || {};
  const status = state.status || '';
  // A session may wait on a request its agent raised after its turn
  // ended: waiting, with no turn to cancel.
  const turnOn = status === 'running' || status === 'stalled' || (status === 'waiting' && !!state.turnId) || busy;
  return html`<div class="main-pane session" data-session=${id}>
    <${Header} id=${id} info=${info} conn=${conn} turnOn=${turnOn}
      onRename=${(title) => act('Rename', async () => setInfo(await api('PATCH', sessionPath(id), { title })))}
      onCancel=${() => act('Cancel', () => api('POST', sessionPath(id, '/cancel'), {}))}
      onUnload=${() => act('Unload', () => api('POST', sessionPath(id, '/unload'), {}))}
      onDelete=${() => act('Delete', async () => { await api('DELETE', sessionPath(id)); onChanged(); navigate('#/'); })} />
    <${Config} config=${config}
      onSet=${(cid, value) => act('Config', async () => setConfig(await api('PUT', sessionPath(id, '/config/' + encodeURIComponent(cid)), { value })))} />
    ${notice ? html`<div class="error banner" data-role="notice">${notice}</div>` : null}
    <div class="log" ref=${logRef} onScroll=${onScroll} data-role="log">
      ${tl && tl.hasMoreBefore
        ? html`<button type="button" class="older" data-role="older" disabled=${loadingOlder} onClick=${loadOlder}>
            ${loadingOlder ? 'Loading older events…' : 'Load older events'}</button>`
        : html`<div class="divider start" data-role="start">Beginning of the session</div>`}
      ${items.map((it) => html`<${Item} key=${it.key} item=${it} onPermission=${answerPermission} onInput=${answerInput} />`)}
    </div>
    <${Queue} info=${info}
      onWithdraw=${(qid) => act('Withdraw', () => api('DELETE', sessionPath(id, '/queue/' + encodeURIComponent(qid))))} />
    <${Composer} busy=${busy} onSend=${prompt} onQueue=${queuePrompt} turnOn=${turnOn}
      onCancel=${() => act('Cancel', () => api('POST', sessionPath(id, '/cancel'), {}))} />
  </div>`;
}

// notPending says why an answer was not taken, and who answered first.
function notPending(r) {
  return 'no longer pending: ' + r.reason + (r.resolvedBy ? ' (' + r.resolvedBy + ' answered first)' : '');
}

function describe(e) {
  if (e instanceof ApiError) return e.code + ': ' + e.message + (e.requestId ? ' (request ' + e.requestId + ')' : '');
  return e.message || String(e);
}

const connNames = { connecting: 'Connecting…', live: 'Live', reconnecting: 'Reconnecting…', failed: 'Disconnected' };

function Header({ id, info, conn, turnOn, onRename, onCancel, onUnload, onDelete }) {
  const [editing, setEditing] = useState(false);
  const [title, setTitle] = useState('');
  const [confirmDelete, setConfirmDelete] = useState(false);
  const [, setAsked] = useState('');
  const st = (info && info.state) || {};
  const waiting = (st.requests || []).length + (st.inputs || []).length;
  return html`<div class="head">
    <div class="head-row">
      <a class="back button" href="#/" data-role="back" aria-label="Back to the sessions">‹ Sessions</a>
      ${editing
        ? html`<form class="rename" onSubmit=${(e) => { e.preventDefault(); setEditing(false); onRename(title); }}>
            <input name="title" value=${title} maxLength="120" onInput=${(e) => setTitle(e.currentTarget.value)} />
            <button type="submit">Save</button>
            <button type="button" onClick=${() => setEditing(false)}>Cancel</button>
          </form>`
        : html`<h2 data-role="title">${(info && info.title) || id}</h2>
            <button type="button" class="link" data-role="rename" onClick=${() => { setTitle((info && info.title) || ''); setEditing(true); }}>Rename</button>`}
      <span class="spacer"></span>
      <span class=${'conn ' + conn.status} data-role="conn" data-stream=${conn.status}
        title=${conn.error ? conn.error.message : ''}>${connNames[conn.status]}${conn.error ? ': ' + conn.error.code : ''}</span>
    </div>
    <div class="head-row meta">
      <span class=${'badge ' + (st.status || '')} data-role="status">${st.status || '…'}</span>
      ${waiting ? html`<span class="badge waiting">needs you: ${waiting}</span>` : null}
      ${st.status === 'failed' && st.error ? html`<span class="error">${st.error.code}: ${st.error.message}</span>` : null}
      <span><b>${id}</b></span>
      ${info && info.createdBy ? html`<span data-role="created-by">opened by <b>${info.createdBy}</b></span>` : null}
      ${info ? html`<span>agent <b>${info.agent}</b></span><span class="path" title=${info.cwd}>${info.cwd}</span>` : null}
      ${info && info.usage ? html`<span data-role="usage">${formatUsage(info.usage)}</span>` : null}
      ${info && info.lastTurnTiming ? html`<span data-role="timing">last turn: ${formatTiming(info.lastTurnTiming)}</span>` : null}
      ${info ? html`<span>updated ${relativeTime(info.updatedAt)}</span>` : null}
    </div>
    <div class="head-row actions">
      <button type="button" data-role="cancel" disabled=${!turnOn} onClick=${onCancel}>Cancel turn</button>
      <button type="button" data-role="unload" onClick=${onUnload}>Unload</button>
      ${canAskToNotify()
        ? html`<button type="button" data-role="notify" title="Be told when a session you watch needs you"
            onClick=${async () => setAsked(await askToNotify())}>Notify me</button>`
        : null}
      ${confirmDelete
        ? html`<button type="button" class="danger" data-role="confirm-delete" onClick=${() => { setConfirmDelete(false); onDelete(); }}>Delete for good</button>
            <button type="button" onClick=${() => setConfirmDelete(false)}>Keep</button>`
        : html`<button type="button" data-role="delete" onClick=${() => setConfirmDelete(true)}>Delete…</button>`}
    </div>
  </div>`;
}

// Config shows the agent's config options (mode, model, …); a change is
// sent at once, and the agent's answer replaces them all.
function Config({ config, onSet }) {
  if (!config || !config.options || config.options.length === 0) return null;
  return html`<div class="config" data-role="config">
    ${config.options.map((o) => {
      if (o.type === 'boolean') {
        return html`<label title=${o.description || ''}><input type="checkbox" checked=${!!o.currentValue}
          onChange=${(e) => onSet(o.id, e.currentTarget.checked)} /> ${o.name || o.id}</label>`;
      }
      const choices = flatten(o.options || []);
      return html`<label title=${o.description || ''}>${o.name || o.id}
        <select data-config=${o.id} value=${o.currentValue} onChange=${(e) => onSet(o.id, e.currentTarget.value)}>
          ${choices.map((c) => html`<option value=${c.value}>${c.name || c.value}</option>`)}
        </select></label>`;
    })}
  </div>`;
}

// flatten reads a select's options, plain or grouped.
function flatten(options) {
  const out = [];
  for (const o of options) {
    if (Array.isArray(o.options)) out.push(...o.options);
    else out.push(o);
  }
  return out;
}

// Queue lists the prompts waiting in the session's queue, each with a way
// to withdraw it before it runs.
function Queue({ info, onWithdraw }) {
  const queued = (info && info.queued) || [];
  if (!queued.length) return null;
  return html`<div class="queue" data-role="queue-list">
    <div class="queue-head">Queued${info.queueHeld ? ' (held: they run after your next prompt)' : ''}</div>
    ${queued.map((q) => html`<div class="queued" key=${q.id} data-role="queued" data-queue-id=${q.id}>
      <span class="pos">${q.position}</span>
      <span class="text">${(q.content || []).map(contentText).join(' ')}</span>
      ${q.principal ? html`<span class="who">${q.principal}</span>` : null}
      <button type="button" class="link" data-role="withdraw" onClick=${() => onWithdraw(q.id)}>Withdraw</button>
    </div>`)}
  </div>`;
}

// Composer is the prompt box, at the page's foot where a thumb reaches:
// Send; while a turn runs, Queue (the prompt runs after it) and Stop.
function Composer({ busy, onSend, onQueue, turnOn, onCancel }) {
  const [text, setText] = useState('');
  const send = async (fn) => {
    const t = text;
    if (!t.trim() || (busy && fn === onSend)) return;
    setText('');
    const ok = await fn(t);
    if (!ok) setText(t);
  };
  return html`<form class="composer" onSubmit=${(e) => { e.preventDefault(); send(onSend); }}>
    <textarea data-role="prompt" placeholder="Prompt the agent (Ctrl+Enter sends)" value=${text}
      onInput=${(e) => setText(e.currentTarget.value)}
      onKeyDown=${(e) => { if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) { e.preventDefault(); send(turnOn ? onQueue : onSend); } }}></textarea>
    <div class="composer-actions">
      <button type="submit" class="primary" data-role="send" disabled=${busy || !text.trim()}>${busy ? 'Running…' : 'Send'}</button>
      ${turnOn ? html`<button type="button" data-role="queue" disabled=${!text.trim()} onClick=${() => send(onQueue)}>Queue</button>` : null}
      ${turnOn ? html`<button type="button" class="danger" data-role="stop" onClick=${onCancel}>Stop</button>` : null}
    </div>
  </form>`;
}
