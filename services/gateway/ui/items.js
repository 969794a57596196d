// The components of a session's conversation, one per timeline item kind
// (timeline.js). Agent text is rendered as text, or as Markdown through
// render.js's markdown(); nothing here builds HTML from agent text itself.

import { h } from './vendor/preact.js';
import { useMemo, useState } from './vendor/hooks.js';
import htm from './vendor/htm.js';
import { markdown, lineDiff } from './render.js';
import { contentText } from './timeline.js';

export const html = htm.bind(h);

export function Item({ item, onPermission, onInput }) {
  switch (item.kind) {
    case 'message':
      return html`<${Message} item=${item} />`;
    case 'tool':
      return html`<${Tool} item=${item} />`;
    case 'plan':
      return html`<${Plan} entries=${item.entries} />`;
    case 'permission':
      return html`<${Permission} item=${item} onAnswer=${onPermission} />`;
    case 'input':
      return html`<${InputRequest} item=${item} onAnswer=${onInput} />`;
    case 'turn':
      return html`<${TurnEnd} item=${item} />`;
    case 'note':
      return html`<div class="divider note">${item.text}</div>`;
    default:
      return html`<details class="other" data-role="other">
        <summary>${item.type}</summary>
        <pre>${json(item.data)}</pre>
      </details>`;
  }
}

const roleNames = { user: 'You', agent: 'Agent', thought: 'Thinking', replay: 'Replayed' };

function Message({ item }) {
  const text = item.text + item.live;
  const plain = item.role === 'user' || item.role === 'replay';
  const rendered = useMemo(() => (plain ? '' : markdown(text)), [plain, text]);
  const cls = 'msg ' + item.role + (item.live ? ' streaming' : '');
  return html`<div class=${cls} data-role="message" data-kind=${item.role}>
    <div class="who" data-role="who">${(item.role === 'user' && item.principal) || roleNames[item.role] || item.role}</div>
    ${plain
      ? html`<div class="body plain">${text}</div>`
      : html`<div class="body md" dangerouslySetInnerHTML=${{ __html: rendered }}></div>`}
  </div>`;
}

// command is what a tool call or a permission request will run, as the
// agent described it in its raw input.
function command(rawInput) {
  if (!rawInput || typeof rawInput !== 'object') return '';
  for (const k of ['command', 'cmd', 'commandLine']) {
    const v = rawInput[k];
    if (typeof v === 'string') return v;
    if (Array.isArray(v)) return v.join(' ');
  }
  return '';
}

function Tool({ item }) {
  const status = item.status || 'pending';
  const cmd = command(item.rawInput);
  return html`<div class=${'tool status-' + status} data-role="tool" data-status=${status}>
    <div class="tool-head">
      <span class=${'badge ' + status}>${status.replace('_', ' ')}</span>
      <span class="tool-title">${item.title || item.toolCallId}</span>
      ${item.toolKind ? html`<span class="tool-kind">${item.toolKind}</span>` : null}
    </div>
    ${cmd && cmd !== item.title ? html`<pre class="cmd">$ ${cmd}</pre>` : null}
    ${(item.locations || []).length
      ? html`<div class="locations">${item.locations.map((l) => html`<code>${l.path}${l.line ? ':' + l.line : ''}</code> `)}</div>`
      : null}
    <${ToolContent} content=${item.content} />
    ${item.rawOutput !== undefined
      ? html`<details class="raw" open=${status === 'failed'}><summary>Output</summary><pre>${rawText(item.rawOutput)}</pre></details>`
      : null}
  </div>`;
}

function ToolContent({ content }) {
  if (!Array.isArray(content) || content.length === 0) return null;
  return html`<div class="tool-content">
    ${content.map((c) => {
      if (c.type === 'diff') return html`<${Diff} path=${c.path} oldText=${c.oldText} newText=${c.newText} />`;
      if (c.type === 'terminal') return html`<div class="terminal">terminal ${c.terminalId}</div>`;
      if (c.type === 'content') return html`<pre class="out">${contentText(c.content)}</pre>`;
      return html`<pre class="out">${json(c)}</pre>`;
    })}
  </div>`;
}

export function Diff({ path, oldText, newText }) {
  const lines = useMemo(() => lineDiff(oldText || '', newText || ''), [oldText, newText]);
  return html`<div class="diff" data-role="diff">
    <div class="diff-path">${oldText ? 'edit' : 'new file'} ${path}</div>
    <pre>${lines.map((l) => html`<span class=${'dl ' + opClass(l.op)}>${(l.op === '…' ? '  … ' + l.text : l.op + ' ' + l.text) + '\n'}</span>`)}</pre>
  </div>`;
}

function opClass(op) {
  return op === '+' ? 'add' : op === '-' ? 'del' : op === '…' ? 'fold' : 'ctx';
}

export function Plan({ entries }) {
  return html`<div class="plan" data-role="plan">
    <div class="who">Plan</div>
    <ul>
      ${entries.map((e) => html`<li class=${'plan-' + (e.status || 'pending')}>
        <input type="checkbox" disabled checked=${e.status === 'completed'} aria-label=${e.status || 'pending'} />
        <span>${e.content}</span>
        ${e.status === 'in_progress' ? html`<span class="badge in_progress">in progress</span>` : null}
      </li>`)}
    </ul>
  </div>`;
}

const outcomeNames = { allow_once: 'Allowed once', allow_always: 'Always allowed', reject_once: 'Rejected', reject_always: 'Always rejected' };

function Permission({ item, onAnswer }) {
  const [busy, setBusy] = useState(false);
  const [err, setErr] = useState('');
  const tc = item.toolCall || {};
  const cmd = command(tc.rawInput);
  const answer = async (optionId) => {
    setBusy(true);
    setErr('');
    try {
      await onAnswer(item.requestId, optionId);
    } catch (e) {
      setErr(e.message);
    } finally {
      setBusy(false);
    }
  };
  let resolved = null;
  if (item.resolved) {
    const r = item.resolved;
    const chosen = r.outcome && r.outcome.optionId;
    const opt = item.options.find((o) => o.optionId === chosen);
    resolved = r.status === 'accepted'
      ? (opt ? outcomeNames[opt.kind] || opt.name : 'Answered') + (chosen ? ' (' + chosen + ')' : '') + (r.principal ? ' by ' + r.principal : '')
      : 'Ended unanswered: ' + (r.reason || r.status);
  }
  return html`<div class=${'card permission' + (item.resolved ? ' resolved' : ' pending')} data-role="permission" data-request=${item.requestId}>
    <div class="card-head">Permission requested${tc.kind ? html` · <span class="tool-kind">${tc.kind}</span>` : null}</div>
    <div class="tool-title">${tc.title || tc.toolCallId || ''}</div>
    ${cmd ? html`<pre class="cmd" data-role="will-run">$ ${cmd}</pre>` : null}
    <${ToolContent} content=${tc.content} />
    ${tc.rawInput !== undefined && !cmd
      ? html`<details open><summary>Input</summary><pre data-role="will-run">${rawText(tc.rawInput)}</pre></details>`
      : null}
    ${resolved
      ? html`<div class="resolution" data-role="resolution">${resolved}</div>`
      : html`<div class="actions">
          ${item.options.map((o) => html`<button type="button" class=${'opt ' + (o.kind || '')} disabled=${busy}
            data-option=${o.optionId} onClick=${() => answer(o.optionId)}>${o.name || o.optionId}</button>`)}
        </div>`}
    ${err ? html`<div class="error">${err}</div>` : null}
  </div>`;
}

// InputRequest is a form built from the agent's requested schema: a flat
// object of typed properties (docs/API.md, Input requests).
function InputRequest({ item, onAnswer }) {
  const props = (item.schema && item.schema.properties) || {};
  const required = new Set((item.schema && item.schema.required) || []);
  const [values, setValues] = useState({});
  const [busy, setBusy] = useState(false);
  const [err, setErr] = useState('');
  const set = (k, v) => setValues({ ...values, [k]: v });
  const send = async (action) => {
    setBusy(true);
    setErr('');
    try {
      await onAnswer(item.requestId, action, action === 'accept' ? collect(props, values) : undefined);
    } catch (e) {
      setErr(e.message);
    } finally {
      setBusy(false);
    }
  };
  const r = item.resolved;
  return html`<div class=${'card input' + (r ? ' resolved' : ' pending')} data-role="input" data-request=${item.requestId}>
    <div class="card-head">Input requested</div>
    <div class="plain">${item.message}</div>
    ${r
      ? html`<div class="resolution" data-role="resolution">${r.status === 'accepted'
          ? r.action + (r.content ? ' ' + JSON.stringify(r.content) : '') + (r.principal ? ' by ' + r.principal : '')
          : 'Ended unanswered: ' + (r.reason || r.status)}</div>`
      : html`<form class="fields" onSubmit=${(e) => { e.preventDefault(); send('accept'); }}>
          ${Object.entries(props).map(([k, p]) => html`<label>
            <span>${p.title || k}${required.has(k) ? ' *' : ''}</span>
            <${Field} name=${k} prop=${p} value=${values[k]} onChange=${(v) => set(k, v)} />
            ${p.description ? html`<small>${p.description}</small>` : null}
          </label>`)}
          <div class="actions">
            <button type="submit" disabled=${busy}>Accept</button>
            <button type="button" disabled=${busy} onClick=${() => send('decline')}>Decline</button>
            <button type="button" disabled=${busy} onClick=${() => send('cancel')}>Cancel</button>
          </div>
        </form>`}
    ${err ? html`<div class="error">${err}</div>` : null}
  </div>`;
}

function Field({ name, prop, value, onChange }) {
  const choices = prop.enum || (prop.items && prop.items.enum);
  if (prop.type === 'boolean') {
    return html`<input type="checkbox" name=${name} checked=${!!value} onChange=${(e) => onChange(e.currentTarget.checked)} />`;
  }
  if (prop.type === 'array' && choices) {
    const sel = new Set(value || []);
    return html`<span class="multi">${choices.map((c) => html`<label><input type="checkbox" checked=${sel.has(c)}
      onChange=${(e) => { const s = new Set(sel); e.currentTarget.checked ? s.add(c) : s.delete(c); onChange([...s]); }} />${c}</label>`)}</span>`;
  }
  if (choices) {
    return html`<select name=${name} value=${value ?? ''} onChange=${(e) => onChange(e.currentTarget.value)}>
      <option value="">—</option>
      ${choices.map((c) => html`<option value=${c}>${c}</option>`)}
    </select>`;
  }
  const type = prop.type === 'number' || prop.type === 'integer' ? 'number' : 'text';
  return html`<input type=${type} name=${name} value=${value ?? ''} onInput=${(e) => onChange(e.currentTarget.value)} />`;
}

// collect turns the form's values into the content the schema asks for.
function collect(props, values) {
  const out = {};
  for (const [k, p] of Object.entries(props)) {
    const v = values[k];
    if (v === undefined || v === '') continue;
    if (p.type === 'number') out[k] = Number(v);
    else if (p.type === 'integer') out[k] = parseInt(v, 10);
    else if (p.type === 'array' && typeof v === 'string') out[k] = v.split(',').map((s) => s.trim()).filter(Boolean);
    else out[k] = v;
  }
  return out;
}

function TurnEnd({ item }) {
  if (item.error) {
    return html`<div class="divider turn failed" data-role="turn-end" data-outcome="failed">
      Turn failed · ${item.error.code}: ${item.error.message}
    </div>`;
  }
  return html`<div class="divider turn" data-role="turn-end" data-outcome=${item.stopReason}>Turn ended · ${item.stopReason}</div>`;
}

function rawText(v) {
  return typeof v === 'string' ? v : json(v);
}

function json(v) {
  try {
    return JSON.stringify(v, null, 2);
  } catch {
    return String(v);
  }
}
