// The Skein console: the session list, a new-session form and a session's
// page (session.js), routed by the URL's fragment (#/, #/new, #/s/<id>), so
// that the gateway serves one page and a reload keeps the place.

import { render } from './vendor/preact.js';
import { useCallback, useEffect, useRef, useState } from './vendor/hooks.js';
import { api, ApiError, getToken, randomID, sessionPath, setToken } from './api.js';
import { html } from './items.js';
import { SessionView } from './session.js';
import { formatUsage, relativeTime } from './render.js';

function route() {
  const h = location.hash.replace(/^#/, '') || '/';
  const m = h.match(/^\/s\/(.+)$/);
  if (m) return { page: 'session', id: decodeURIComponent(m[1]) };
  if (h === '/new') return { page: 'new' };
  return { page: 'home' };
}

function navigate(hash) {
  location.hash = hash;
}

function App() {
  const [where, setWhere] = useState(route());
  const [token, setTok] = useState(getToken());
  const [listVersion, setListVersion] = useState(0);
  useEffect(() => {
    const on = () => setWhere(route());
    addEventListener('hashchange', on);
    return () => removeEventListener('hashchange', on);
  }, []);
  const changed = useCallback(() => setListVersion((v) => v + 1), []);
  const saveToken = (t) => {
    setToken(t);
    setTok(t);
    changed();
  };
  // On a narrow screen one pane shows at a time (style.css): the list on
  // the home page, a session or the new-session form, each with a way back.
  return html`<div class=${'app page-' + where.page}>
    <header class="top">
      <a class="brand" href="#/">Skein</a>
      <${TokenBar} token=${token} onSave=${saveToken} />
    </header>
    <aside class="side">
      <div class="side-head">
        <a class="button primary" href="#/new" data-role="new-session">New session</a>
        <button type="button" onClick=${changed} title="Reload the list">Refresh</button>
      </div>
      <${SessionList} key=${token} version=${listVersion} current=${where.id} />
    </aside>
    <main class="main">
      ${where.page === 'session'
        ? html`<${SessionView} key=${where.id + '|' + token} id=${where.id} onChanged=${changed} navigate=${navigate} />`
        : where.page === 'new'
          ? html`<${NewSession} key=${token} onOpened=${(id) => { changed(); navigate('#/s/' + encodeURIComponent(id)); }} />`
          : html`<div class="main-pane welcome">
              <h2>Agents as durable sessions</h2>
              <p>Pick a session on the left, or open a new one. Enter a bearer token above if the gateway asks for one
                (<code>skein dev</code> writes it to <code>.skein/dev-token</code>).</p>
            </div>`}
    </main>
  </div>`;
}

// TokenBar holds the bearer token in the tab's sessionStorage.
function TokenBar({ token, onSave }) {
  const [value, setValue] = useState('');
  if (token) {
    return html`<div class="token">
      <span class="muted">Token set for this tab</span>
      <button type="button" data-role="forget-token" onClick=${() => onSave('')}>Forget</button>
    </div>`;
  }
  return html`<form class="token" onSubmit=${(e) => { e.preventDefault(); onSave(value.trim()); setValue(''); }}>
    <input type="password" data-role="token" placeholder="Bearer token" autocomplete="off" value=${value}
      onInput=${(e) => setValue(e.currentTarget.value)} />
    <button type="submit" data-role="save-token">Use token</button>
  </form>`;
}

// SessionList shows the caller's sessions, newest update first, reading
// the next page as the list is scrolled to its end.
const listPage = 25;

function SessionList({ version, current }) {
  const [rows, setRows] = useState([]);
  const [next, setNext] = useState(null);
  const [error, setError] = useState(null);
  const [, setTick] = useState(0);
  const loading = useRef(false);
  const boxRef = useRef(null);

  const load = useCallback(async (cursor) => {
    if (loading.current) return;
    loading.current = true;
    try {
      const page = await api('GET', '/v1/sessions?limit=' + listPage + (cursor ? '&cursor=' + encodeURIComponent(cursor) : ''));
      setError(null);
      setRows((old) => {
        if (!cursor) return page.sessions;
        const seen = new Set(old.map((s) => s.sessionId));
        return old.concat(page.sessions.filter((s) => !seen.has(s.sessionId)));
      });
      setNext(page.nextCursor || null);
    } catch (e) {
      setError(e);
    } finally {
      loading.current = false;
    }
  }, []);

  useEffect(() => {
    load(null);
  }, [version]);

  // The first page again every 10 s, and the relative times with it.
  useEffect(() => {
    const t = setInterval(() => {
      setTick((n) => n + 1);
      if (!next) load(null);
    }, 10000);
    return () => clearInterval(t);
  }, [next]);

  const onScroll = () => {
    const el = boxRef.current;
    if (next && el.scrollHeight - el.scrollTop - el.clientHeight < 120) load(next);
  };

  // The tab's title counts the sessions that need their viewer.
  const needing = rows.filter(needsOf).length;
  useEffect(() => {
    document.title = (needing ? '(' + needing + ') ' : '') + 'Skein console';
  }, [needing]);

  return html`<div class="list" ref=${boxRef} onScroll=${onScroll} data-role="sessions">
    ${error ? html`<div class="error" data-role="list-error">${error instanceof ApiError && error.status === 401
      ? 'The gateway wants a bearer token: enter it above.'
      : error.message}</div>` : null}
    ${rows.map((s) => html`<${SessionRow} key=${s.sessionId} s=${s} current=${s.sessionId === current} />`)}
    ${next ? html`<button type="button" class="more" onClick=${() => load(next)}>More sessions</button>` : null}
    ${!error && rows.length === 0 ? html`<div class="muted empty">No sessions yet.</div>` : null}
  </div>`;
}

// needsOf says what session s waits on its viewer for: a permission, an
// input, or nothing ('').
function needsOf(s) {
  const st = s.state || {};
  return (st.requests || []).length ? 'permission' : (st.inputs || []).length ? 'input' : '';
}

function SessionRow({ s, current }) {
  const st = s.state || {};
  const needs = needsOf(s);
  return html`<a class=${'row' + (current ? ' current' : '')} href=${'#/s/' + encodeURIComponent(s.sessionId)}
      data-role="session-row" data-session=${s.sessionId}>
    <div class="row-top">
      <span class="row-title">${s.title || s.sessionId}</span>
      <span class=${'badge ' + (st.status || '')}>${st.status || ''}</span>
    </div>
    <div class="row-meta">
      ${needs ? html`<span class="badge needs" data-role="needs">needs ${needs}</span>` : null}
      <span>${s.agent}</span>
      ${s.usage ? html`<span>${formatUsage(s.usage)}</span>` : null}
      <span class="when" title=${s.updatedAt}>${relativeTime(s.updatedAt)}</span>
    </div>
  </a>`;
}

// NewSession opens a session: its ID, its agent from GET /v1/agents, its
// working directory picked from GET /v1/directories, and how permission
// requests are answered.
function NewSession({ onOpened }) {
  const [sid, setSid] = useState('s-' + randomID(8));
  const [agents, setAgents] = useState(null);
  const [agent, setAgent] = useState('');
  const [cwd, setCwd] = useState('');
  const [policy, setPolicy] = useState('ask');
  const [error, setError] = useState('');
  const [busy, setBusy] = useState(false);
  useEffect(() => {
    api('GET', '/v1/agents').then((r) => {
      setAgents(r.agents);
      const first = r.agents.find((a) => a.installed);
      if (first) setAgent(first.id);
    }, (e) => setError(e.message));
  }, []);
  const submit = async (e) => {
    e.preventDefault();
    setBusy(true);
    setError('');
    try {
      const body = { agent, permissionPolicy: policy };
      if (cwd) body.cwd = cwd;
      await api('PUT', sessionPath(sid), body);
      onOpened(sid);
    } catch (err) {
      setError(err instanceof ApiError ? err.code + ': ' + err.message : err.message);
    } finally {
      setBusy(false);
    }
  };
  return html`<div class="main-pane">
    <form class="new-session" onSubmit=${submit} data-role="new-form">
      <a class="back button" href="#/" data-role="back" aria-label="Back to the sessions">‹ Sessions</a>
      <h2>New session</h2>
      <label>Session ID <input name="id" data-role="session-id" value=${sid} required
        onInput=${(e) => setSid(e.currentTarget.value)} /></label>
      <label>Agent
        <select name="agent" data-role="agent" value=${agent} onChange=${(e) => setAgent(e.currentTarget.value)}>
          ${(agents || []).map((a) => html`<option value=${a.id} disabled=${!a.installed}>
            ${a.id}${a.installed ? '' : ' (not installed)'}</option>`)}
        </select>
      </label>
      <label>Permission requests
        <select name="policy" data-role="policy" value=${policy} onChange=${(e) => setPolicy(e.currentTarget.value)}>
          <option value="ask">Ask me</option>
          <option value="allow_all">Allow all</option>
          <option value="reject_all">Reject all</option>
        </select>
      </label>
      <div class="field">
        <span>Working directory</span>
        <div class="cwd" data-role="cwd">${cwd || 'a new folder for this session'}</div>
        <${DirPicker} selected=${cwd} onPick=${setCwd} />
      </div>
      ${error ? html`<div class="error" data-role="open-error">${error}</div>` : null}
      <button type="submit" class="primary" data-role="open" disabled=${busy || !agent}>Open session</button>
    </form>
  </div>`;
}

// DirPicker browses the folders a session may work in.
function DirPicker({ selected, onPick }) {
  const [path, setPath] = useState('');
  const [listing, setListing] = useState(null);
  const [error, setError] = useState('');
  useEffect(() => {
    setError('');
    api('GET', '/v1/directories' + (path ? '?path=' + encodeURIComponent(path) : '')).then(setListing, (e) => {
      setListing(null);
      setError(e.message);
    });
  }, [path]);
  const open = (p) => {
    setPath(p);
    onPick(p);
  };
  return html`<div class="picker" data-role="picker">
    <div class="picker-bar">
      <button type="button" disabled=${!path} onClick=${() => setPath(listing && listing.parent ? listing.parent : '')}>Up</button>
      <span class="path">${path || 'Workspace roots'}</span>
      <button type="button" class="link" disabled=${!selected} onClick=${() => { onPick(''); setPath(''); }}>Use the default</button>
    </div>
    ${error ? html`<div class="error">${error}</div>` : null}
    <ul>
      ${listing && listing.directories.map((d) => html`<li>
        <button type="button" class=${'dir' + (d.path === selected ? ' chosen' : '')} data-path=${d.path}
          onClick=${() => open(d.path)}>${d.name || d.path}</button></li>`)}
      ${listing && listing.directories.length === 0 ? html`<li class="muted">No folders here.</li>` : null}
      ${listing && listing.truncated ? html`<li class="muted">More folders were left out.</li>` : null}
    </ul>
  </div>`;
}

render(html`<${App} />`, document.getElementById('app'));
