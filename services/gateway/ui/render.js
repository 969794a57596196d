// Rendering of untrusted agent output. Agent text reaches the page only
// two ways: as text (Preact's text nodes, never parsed), or as Markdown
// through markdown() below, whose HTML is marked's with every raw HTML
// element escaped, then sanitized by DOMPurify. Nothing else ever gives
// the page HTML to parse.

import { Marked } from './vendor/marked.js';
import DOMPurify from './vendor/purify.js';

function escapeHTML(s) {
  return s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]);
}

const md = new Marked({
  gfm: true,
  breaks: false,
  async: false,
  renderer: {
    // Raw HTML in an agent's Markdown (a block or an inline tag) is shown
    // as the text it is: an agent's "<script>" is something it wrote, not
    // something for the page to run or hide.
    html({ text }) {
      return escapeHTML(text);
    },
  },
});

const purifier = DOMPurify;
purifier.addHook('afterSanitizeAttributes', (node) => {
  // Links leave the console in a new tab that cannot reach back to it.
  if (node.tagName === 'A') {
    node.setAttribute('target', '_blank');
    node.setAttribute('rel', 'noopener noreferrer');
  }
});

const purifyOptions = {
  USE_PROFILES: { html: true },
  FORBID_TAGS: ['style', 'form', 'input', 'button', 'textarea', 'select'],
  FORBID_ATTR: ['style'],
};

// markdown returns sanitized HTML for an agent's Markdown text.
export function markdown(text) {
  let html;
  try {
    html = md.parse(text || '');
  } catch {
    html = '<pre>' + escapeHTML(text || '') + '</pre>';
  }
  return purifier.sanitize(html, purifyOptions);
}

// lineDiff returns a compact line diff of two texts: a list of
// {op: ' '|'-'|'+', text}, unchanged runs longer than 2*context lines
// folded to {op: '…', text: 'n unchanged lines'}. Texts too large for the
// quadratic diff are shown as all removed, then all added.
export function lineDiff(oldText, newText, context = 3) {
  const a = oldText ? oldText.split('\n') : [];
  const b = newText ? newText.split('\n') : [];
  let ops;
  if (a.length * b.length > 4_000_000) {
    ops = a.map((t) => ({ op: '-', text: t })).concat(b.map((t) => ({ op: '+', text: t })));
  } else {
    ops = lcsDiff(a, b);
  }
  return fold(ops, context);
}

function lcsDiff(a, b) {
  // Trim the common ends first: most edits touch few lines.
  let start = 0;
  while (start < a.length && start < b.length && a[start] === b[start]) start++;
  let ea = a.length;
  let eb = b.length;
  while (ea > start && eb > start && a[ea - 1] === b[eb - 1]) {
    ea--;
    eb--;
  }
  const n = ea - start;
  const m = eb - start;
  const dp = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
  for (let i = n - 1; i >= 0; i--) {
    for (let j = m - 1; j >= 0; j--) {
      dp[i][j] = a[start + i] === b[start + j] ? dp[i + 1][j + 1] + 1 : Math.max(dp[i + 1][j], dp[i][j + 1]);
    }
  }
  const ops = [];
  for (let k = 0; k < start; k++) ops.push({ op: ' ', text: a[k] });
  let i = 0;
  let j = 0;
  while (i < n && j < m) {
    if (a[start + i] === b[start + j]) {
      ops.push({ op: ' ', text: a[start + i] });
      i++;
      j++;
    } else if (dp[i + 1][j] >= dp[i][j + 1]) {
      ops.push({ op: '-', text: a[start + i++] });
    } else {
      ops.push({ op: '+', text: b[start + j++] });
    }
  }
  while (i < n) ops.push({ op: '-', text: a[start + i++] });
  while (j < m) ops.push({ op: '+', text: b[start + j++] });
  for (let k = ea; k < a.length; k++) ops.push({ op: ' ', text: a[k] });
  return ops;
}

function fold(ops, context) {
  const out = [];
  let i = 0;
  while (i < ops.length) {
    if (ops[i].op !== ' ') {
      out.push(ops[i++]);
      continue;
    }
    let j = i;
    while (j < ops.length && ops[j].op === ' ') j++;
    const run = j - i;
    const lead = i === 0 ? 0 : context;
    const tail = j === ops.length ? 0 : context;
    if (run > lead + tail + 1) {
      for (let k = i; k < i + lead; k++) out.push(ops[k]);
      out.push({ op: '…', text: run - lead - tail + ' unchanged lines' });
      for (let k = j - tail; k < j; k++) out.push(ops[k]);
    } else {
      for (let k = i; k < j; k++) out.push(ops[k]);
    }
    i = j;
  }
  return out;
}

// relativeTime says how long ago an RFC 3339 time was, briefly.
export function relativeTime(iso, now = Date.now()) {
  const t = Date.parse(iso);
  if (!Number.isFinite(t)) return '';
  const s = Math.max(0, Math.round((now - t) / 1000));
  if (s < 45) return 'just now';
  if (s < 90 * 60) return Math.round(s / 60) + ' min ago';
  if (s < 36 * 3600) return Math.round(s / 3600) + ' h ago';
  return Math.round(s / 86400) + ' d ago';
}

// formatUsage renders a session's usage: tokens in context, and cost.
export function formatUsage(u) {
  if (!u) return '';
  let s = '';
  if (Number.isFinite(u.used) && Number.isFinite(u.size) && u.size > 0) {
    s = compact(u.used) + ' / ' + compact(u.size) + ' tokens (' + Math.round((100 * u.used) / u.size) + '%)';
  }
  if (u.cost && typeof u.cost.amount === 'number') {
    s += (s ? ' · ' : '') + u.cost.amount.toFixed(u.cost.amount < 1 ? 4 : 2) + ' ' + u.cost.currency;
  }
  return s;
}

function compact(n) {
  if (n >= 1e6) return (n / 1e6).toFixed(1) + 'M';
  if (n >= 1e3) return (n / 1e3).toFixed(1) + 'k';
  return String(n);
}

// formatTiming renders a turn's timing (lastTurnTiming) in seconds.
export function formatTiming(t) {
  if (!t) return '';
  const parts = [];
  if (t.dispatchMs !== undefined) parts.push('delivered ' + secs(t.dispatchMs));
  if (t.firstReplyMs !== undefined) parts.push('first reply ' + secs(t.firstReplyMs));
  if (t.finishedMs !== undefined) parts.push('finished ' + secs(t.finishedMs));
  return parts.join(' · ');
}

function secs(ms) {
  return ms < 1000 ? ms + ' ms' : (ms / 1000).toFixed(1) + ' s';
}
