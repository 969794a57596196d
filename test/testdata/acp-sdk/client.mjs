// client.mjs: one ACP client, the official TypeScript SDK's, run against
// Skein for test/acp_sdk_test.go. It reports facts and asserts nothing: the
// Go test decides what they mean.
//
//   node client.mjs CONFIG_JSON
//
// CONFIG_JSON (one argument) says:
//
//   sdk        the directory `make acp-sdk` installed the SDK in (else
//              $SKEIN_ACP_SDK)
//   transport  "stdio" (spawn `skein acp ARGS` and speak ndJSON on its stdio),
//              "ws" (WebSocket to url) or "http" (Streamable HTTP to url)
//   skein, args, env   stdio: the skein binary, the arguments after "acp",
//              and what to add to the agent process's environment
//   url, token ws and http: the /acp endpoint, and the bearer token ("" sends
//              no Authorization header)
//   cwd        the cwd of session/new, load and resume
//   permission how session/request_permission is answered: {answer:
//              "select", optionId}, {answer: "cancel"}, or {answer: "hold"}
//              (never, until the agent withdraws it with $/cancel_request)
//   steps      what to do, in order (below); the first that fails ends the
//              run, unless continueOnError is true
//   raw        instead of steps: JSON-RPC text to send as it is, no SDK
//              (below)
//   timeoutMs  the whole run's bound (default 60000)
//
// Each step is {op, name?, ...}. A sessionId of "$new" (the default) is the
// session of the last session/new. The ops:
//
//   initialize                      protocol version 1, no client capabilities
//   new {meta?, cwd?}               session/new {cwd, mcpServers: [], _meta}
//   load {sessionId, meta?, cwd?}   session/load
//   resume {sessionId, cwd?}        session/resume
//   list {cwd?}                     session/list, following nextCursor
//   close {sessionId}               session/close
//   prompt {sessionId, text, async?}  session/prompt; with async, a name to
//                                   await later
//   await {async}                   the outcome of an async prompt
//   cancel {sessionId}              the session/cancel notification
//   setConfig {sessionId, configId, value}   session/set_config_option
//   setMode {sessionId, modeId}     session/set_mode
//   mark {event}                    print {"event": event, sessionId} at once
//   wait {line}                     read standard input until that line
//   waitUpdate {sessionId?, textIncludes, timeoutMs?}  until a session/update
//                                   whose content text includes the string
//   waitPermission {timeoutMs?}     until a session/request_permission came
//
// Standard output carries one JSON object a line: {"event": …} as things
// happen (the stdio agent's pid, a session made, a permission request, an
// async prompt's answer, a mark, a failed step that ends the run), and last
// {"result": …}:
//
//   steps        [{op, name, ok, result | error, reqIndex, respIndex, ms}],
//                the indexes being the request's and the response's places
//                in wire, ms how long the step took
//   wire         every JSON-RPC message in the order the client's connection
//                read (in) or wrote (out) it, as the transport carried it
//   sdkUpdates   how many session/update notifications the SDK accepted (its
//                schema validates them): fewer than wire holds means some
//                were refused
//   permissions  each session/request_permission: its JSON-RPC id, params,
//                what the client answered, and whether the agent withdrew it
//   agentExit    stdio: how the skein acp process ended once its stdin
//                closed (agentExitMs later; agentExitTimeout: not in 10 s)
//   fatal        what stopped the run, if anything did
//
// An error is {code, message, data, httpStatus}: the JSON-RPC error's, or for
// a transport that failed, its message and the HTTP status it was refused
// with.
//
// With raw, the strings are sent one by one after an initialize, then a
// session/list with id "final", over a plain connection (a process's stdin,
// a WebSocket, POSTs with the SSE stream open); the result is {raw: {sent,
// received, closedEarly}}, where sent holds each POST's HTTP status and body.

import { spawn } from "node:child_process";
import { createRequire } from "node:module";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { Readable, Writable } from "node:stream";
import { pathToFileURL } from "node:url";

const cfg = JSON.parse(process.argv[2] ?? "{}");
const sdkDir = cfg.sdk || process.env.SKEIN_ACP_SDK;
if (!sdkDir) {
  throw new Error("no SDK: give config.sdk or SKEIN_ACP_SDK (make acp-sdk)");
}
// The packages are installed under sdkDir, not beside this script: resolve
// them from there, through their export maps.
const requireFromSDK = createRequire(join(sdkDir, "package.json"));
const load = (spec) => import(pathToFileURL(requireFromSDK.resolve(spec)).href);

const emit = (obj) => process.stdout.write(JSON.stringify(obj) + "\n");

// Lines from the Go test, for the wait op.
const lines = [];
let lineWaiters = [];
createInterface({ input: process.stdin }).on("line", (line) => {
  lines.push(line);
  for (const w of lineWaiters.splice(0)) w();
});
async function waitLine(want) {
  for (;;) {
    const i = lines.indexOf(want);
    if (i >= 0) {
      lines.splice(i, 1);
      return;
    }
    await new Promise((resolve) => lineWaiters.push(resolve));
  }
}

// The wire log, and waiters for what arrives on it.
const wire = [];
let wireWaiters = [];
function logWire(dir, msg) {
  wire.push({ dir, msg: JSON.parse(JSON.stringify(msg)) });
  wake();
}
// wake has waitWire look again: something it may wait for happened.
function wake() {
  for (const w of wireWaiters.splice(0)) w();
}
async function waitWire(cond, timeoutMs, what) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (cond()) return;
    const left = deadline - Date.now();
    if (left <= 0) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => {
      const t = setTimeout(resolve, left);
      wireWaiters.push(() => {
        clearTimeout(t);
        resolve();
      });
    });
  }
}

// tap logs what crosses a stream of JSON-RPC messages, in the order the
// connection reads and writes them.
function tap(stream) {
  const readable = stream.readable.pipeThrough(
    new TransformStream({
      transform(msg, controller) {
        logWire("in", msg);
        controller.enqueue(msg);
      },
    }),
  );
  const writer = stream.writable.getWriter();
  const writable = new WritableStream({
    async write(msg) {
      logWire("out", msg);
      await writer.write(msg);
    },
    close: () => writer.close(),
    abort: (reason) => writer.abort(reason),
  });
  return { readable, writable };
}

function errorFacts(e) {
  const out = { message: String(e?.message ?? e) };
  if (typeof e?.code === "number") out.code = e.code;
  if (e?.data !== undefined) out.data = e.data;
  if (typeof e?.status === "number") out.httpStatus = e.status;
  // ws refuses an upgrade with this message, and the SDK passes it on.
  const m = /Unexpected server response: (\d+)/.exec(out.message);
  if (m && out.httpStatus === undefined) out.httpStatus = Number(m[1]);
  return out;
}

let agent; // the stdio agent process
const result = { steps: [], wire, sdkUpdates: 0, permissions: [] };
let finished = false;
async function finish(code) {
  if (finished) return;
  finished = true;
  if (agent && result.agentExit === undefined) {
    // Closing its stdin is how an ACP client lets an agent go.
    const t0 = Date.now();
    agent.stdin.end();
    const exited = await Promise.race([
      agentExited,
      new Promise((resolve) => setTimeout(() => resolve(false), 10000)),
    ]);
    if (exited === false) {
      result.agentExitTimeout = true;
      agent.kill("SIGKILL");
      await agentExited;
    }
    result.agentExitMs = Date.now() - t0;
  }
  emit({ result });
  process.exit(code);
}
let agentExited;

setTimeout(() => {
  result.fatal = `timed out after ${cfg.timeoutMs ?? 60000} ms`;
  void finish(1);
}, cfg.timeoutMs ?? 60000).unref();

function spawnAgent() {
  agent = spawn(cfg.skein, ["acp", ...(cfg.args ?? [])], {
    env: { ...process.env, ...(cfg.env ?? {}) },
    stdio: ["pipe", "pipe", "inherit"],
  });
  agentExited = new Promise((resolve) => {
    agent.on("exit", (code, signal) => {
      result.agentExit = { code, signal };
      resolve(true);
    });
  });
  agent.stdin.on("error", () => {}); // an agent gone is reported by its exit
  emit({ event: "agent", pid: agent.pid });
  return agent;
}

function authHeaders() {
  return cfg.token ? { Authorization: `Bearer ${cfg.token}` } : {};
}

async function openStream(acp) {
  switch (cfg.transport) {
    case "stdio": {
      const p = spawnAgent();
      return acp.ndJsonStream(Writable.toWeb(p.stdin), Readable.toWeb(p.stdout));
    }
    case "ws": {
      const { createWebSocketStream } = await load("@agentclientprotocol/sdk/experimental/ws-client");
      const { default: WebSocket } = await load("ws");
      return createWebSocketStream(cfg.url, { WebSocket, headers: authHeaders() });
    }
    case "http": {
      const { createHttpStream } = await load("@agentclientprotocol/sdk/experimental/http-client");
      return createHttpStream(cfg.url, { headers: authHeaders() });
    }
  }
  throw new Error(`unknown transport ${cfg.transport}`);
}

// Places of a step's request and response in the wire.
function places(method, from) {
  const req = wire.findIndex((w, i) => i >= from && w.dir === "out" && w.msg.method === method && "id" in w.msg);
  if (req < 0) return {};
  const id = wire[req].msg.id;
  const resp = wire.findIndex((w, i) => i > req && w.dir === "in" && !("method" in w.msg) && w.msg.id === id);
  return { reqIndex: req, respIndex: resp < 0 ? undefined : resp };
}

function updateText(w) {
  const u = w.msg?.params?.update;
  return typeof u?.content?.text === "string" ? u.content.text : undefined;
}

async function runSteps(acp) {
  const app = acp
    .client({ name: "skein-acp-sdk-test" })
    .onRequest(acp.methods.client.session.requestPermission, async (ctx) => {
      const seen = { id: ctx.requestId, params: ctx.params, withdrawn: false };
      result.permissions.push(seen);
      wake();
      emit({ event: "permission", id: ctx.requestId, sessionId: ctx.params.sessionId, toolCallId: ctx.params.toolCall?.toolCallId });
      const p = cfg.permission ?? { answer: "hold" };
      if (p.answer === "select") {
        seen.answered = p.optionId;
        return { outcome: { outcome: "selected", optionId: p.optionId } };
      }
      if (p.answer === "cancel") {
        seen.answered = "cancelled";
        return { outcome: { outcome: "cancelled" } };
      }
      await new Promise((resolve) => {
        if (ctx.signal.aborted) resolve();
        ctx.signal.addEventListener("abort", resolve, { once: true });
      });
      seen.withdrawn = true;
      seen.withdrawReason = errorFacts(ctx.signal.reason);
      return { outcome: { outcome: "cancelled" } };
    })
    .onNotification(acp.methods.client.session.update, () => {
      result.sdkUpdates++;
    });

  const conn = app.connect(tap(await openStream(acp)));
  const peer = conn.agent;
  let lastSession;
  const sid = (s) => (s.sessionId === undefined || s.sessionId === "$new" ? lastSession : s.sessionId);
  const pending = new Map();

  for (const s of cfg.steps ?? []) {
    // An async prompt's step is its start; its await is the prompt's.
    const entry = { op: s.op, name: s.name ?? (s.async && s.op === "prompt" ? `start ${s.async}` : s.op), ok: true };
    const from = wire.length;
    const t0 = Date.now();
    const call = async (method, params) => {
      try {
        entry.result = await peer.request(method, params);
      } catch (e) {
        entry.ok = false;
        entry.error = errorFacts(e);
      }
      Object.assign(entry, places(method, from));
    };
    switch (s.op) {
      case "initialize":
        await call(acp.methods.agent.initialize, {
          protocolVersion: 1,
          clientCapabilities: { fs: { readTextFile: false, writeTextFile: false }, terminal: false },
          clientInfo: { name: "skein-acp-sdk-test", version: "1.0.0" },
        });
        break;
      case "new":
        await call(acp.methods.agent.session.new, { cwd: s.cwd ?? cfg.cwd, mcpServers: [], ...(s.meta ? { _meta: s.meta } : {}) });
        if (entry.ok) {
          lastSession = entry.result.sessionId;
          emit({ event: "session", sessionId: lastSession });
        }
        break;
      case "load":
        await call(acp.methods.agent.session.load, { sessionId: sid(s), cwd: s.cwd ?? cfg.cwd, mcpServers: [], ...(s.meta ? { _meta: s.meta } : {}) });
        break;
      case "resume":
        await call(acp.methods.agent.session.resume, { sessionId: sid(s), cwd: s.cwd ?? cfg.cwd, mcpServers: [] });
        break;
      case "list": {
        const pages = [];
        let cursor;
        do {
          await call(acp.methods.agent.session.list, { ...(s.cwd ? { cwd: s.cwd } : {}), ...(cursor ? { cursor } : {}) });
          if (!entry.ok) break;
          pages.push(entry.result);
          cursor = entry.result?.nextCursor ?? undefined;
        } while (cursor && pages.length < 1000);
        if (entry.ok) entry.result = { pages };
        break;
      }
      case "close":
        await call(acp.methods.agent.session.close, { sessionId: sid(s) });
        break;
      case "prompt": {
        const params = { sessionId: sid(s), prompt: [{ type: "text", text: s.text }] };
        if (s.async) {
          const promise = peer.request(acp.methods.agent.session.prompt, params).then(
            (r) => {
              emit({ event: "settled", async: s.async, result: r });
              return { r };
            },
            (e) => {
              emit({ event: "settled", async: s.async, error: errorFacts(e) });
              return { e };
            },
          );
          pending.set(s.async, { from, promise });
          entry.result = { started: s.async };
        } else {
          await call(acp.methods.agent.session.prompt, params);
        }
        break;
      }
      case "await": {
        const p = pending.get(s.async);
        const { r, e } = await p.promise;
        if (e) {
          entry.ok = false;
          entry.error = errorFacts(e);
        } else {
          entry.result = r;
        }
        Object.assign(entry, places(acp.methods.agent.session.prompt, p.from));
        break;
      }
      case "cancel":
        await peer.notify(acp.methods.agent.session.cancel, { sessionId: sid(s) });
        break;
      case "setConfig":
        await call(acp.methods.agent.session.setConfigOption, { sessionId: sid(s), configId: s.configId, value: s.value });
        break;
      case "setMode":
        await call(acp.methods.agent.session.setMode, { sessionId: sid(s), modeId: s.modeId });
        break;
      case "mark":
        emit({ event: s.event, sessionId: lastSession });
        break;
      case "wait":
        await waitLine(s.line);
        break;
      case "waitUpdate": {
        const want = sid(s);
        try {
          await waitWire(
            () =>
              wire.some(
                (w) =>
                  w.dir === "in" &&
                  w.msg.method === "session/update" &&
                  (!want || w.msg.params?.sessionId === want) &&
                  (updateText(w) ?? "").includes(s.textIncludes),
              ),
            s.timeoutMs ?? 20000,
            `an update with ${JSON.stringify(s.textIncludes)}`,
          );
        } catch (e) {
          entry.ok = false;
          entry.error = errorFacts(e);
        }
        break;
      }
      case "waitPermission":
        try {
          await waitWire(() => result.permissions.length > 0, s.timeoutMs ?? 20000, "a permission request");
        } catch (e) {
          entry.ok = false;
          entry.error = errorFacts(e);
        }
        break;
      default:
        throw new Error(`unknown op ${s.op}`);
    }
    entry.ms = Date.now() - t0;
    result.steps.push(entry);
    if (!entry.ok && !cfg.continueOnError) {
      result.stoppedAt = entry.name;
      emit({ event: "stopped", step: entry.name });
      break;
    }
  }
  conn.close();
}

// The raw run: messages as bytes, for what no SDK would send.
async function runRaw() {
  const initialize = JSON.stringify({
    jsonrpc: "2.0",
    id: "init",
    method: "initialize",
    params: { protocolVersion: 1, clientCapabilities: {} },
  });
  const final = JSON.stringify({ jsonrpc: "2.0", id: "final", method: "session/list", params: {} });
  const raw = { sent: [], received: [], closedEarly: false };
  result.raw = raw;
  const gotFinal = () => raw.received.some((m) => m?.id === "final");
  let closed = false; // the agent or the server ended the connection
  const receive = (text) => {
    let v;
    try {
      v = JSON.parse(text);
    } catch {
      v = { notJSON: text };
    }
    raw.received.push(v);
    wake();
  };
  const waitFinal = () => waitWire(() => closed || gotFinal(), 20000, "the answer to the final request");
  const messages = [initialize, ...cfg.raw, final];

  switch (cfg.transport) {
    case "stdio": {
      const p = spawnAgent();
      let buf = "";
      p.stdout.setEncoding("utf8");
      p.stdout.on("data", (d) => {
        buf += d;
        let i;
        while ((i = buf.indexOf("\n")) >= 0) {
          const line = buf.slice(0, i).trim();
          buf = buf.slice(i + 1);
          if (line) receive(line);
        }
      });
      agentExited.then(() => {
        closed = true;
        raw.closedEarly = !gotFinal();
        wake();
      });
      for (const m of messages) {
        raw.sent.push({ text: m });
        p.stdin.write(m + "\n");
      }
      await waitFinal().catch((e) => (raw.error = errorFacts(e)));
      return;
    }
    case "ws": {
      const { default: WebSocket } = await load("ws");
      const ws = new WebSocket(cfg.url, { headers: authHeaders() });
      ws.on("message", (data, isBinary) => receive(isBinary ? "(binary)" : data.toString()));
      ws.on("close", () => {
        closed = true;
        raw.closedEarly = !gotFinal();
        wake();
      });
      const opened = await new Promise((resolve) => {
        ws.on("open", () => resolve(true));
        ws.on("error", (e) => {
          raw.error = errorFacts(e);
          resolve(false);
        });
      });
      if (!opened) return;
      for (const m of messages) {
        raw.sent.push({ text: m });
        ws.send(m);
      }
      await waitFinal().catch((e) => (raw.error = errorFacts(e)));
      ws.close();
      return;
    }
    case "http": {
      const post = async (text, conn) => {
        const res = await fetch(cfg.url, {
          method: "POST",
          headers: { ...authHeaders(), "Content-Type": "application/json", ...(conn ? { "Acp-Connection-Id": conn } : {}) },
          body: text,
        });
        const body = await res.text();
        let parsed;
        try {
          parsed = JSON.parse(body);
        } catch {
          parsed = body;
        }
        raw.sent.push({ text, status: res.status, body: parsed, connectionId: res.headers.get("Acp-Connection-Id") ?? undefined });
        return res;
      };
      const init = await post(initialize);
      const conn = init.headers.get("Acp-Connection-Id");
      if (!conn) return;
      const abort = new AbortController();
      const sse = await fetch(cfg.url, {
        headers: { ...authHeaders(), Accept: "text/event-stream", "Acp-Connection-Id": conn },
        signal: abort.signal,
      });
      raw.sseStatus = sse.status;
      if (sse.ok && sse.body) {
        void (async () => {
          const decoder = new TextDecoder();
          let buf = "";
          try {
            for await (const chunk of sse.body) {
              buf += decoder.decode(chunk, { stream: true });
              let i;
              while ((i = buf.search(/\r?\n\r?\n/)) >= 0) {
                const event = buf.slice(0, i);
                buf = buf.slice(i).replace(/^\r?\n\r?\n/, "");
                const data = event
                  .split(/\r?\n/)
                  .filter((l) => l.startsWith("data:"))
                  .map((l) => l.slice(5).replace(/^ /, ""))
                  .join("\n");
                if (data) receive(data);
              }
            }
            closed = true;
            raw.closedEarly = !gotFinal();
          } catch {
            // aborted at the end
          }
          wake();
        })();
      }
      for (const m of messages.slice(1)) await post(m, conn);
      await waitFinal().catch((e) => (raw.error = errorFacts(e)));
      abort.abort();
      await fetch(cfg.url, { method: "DELETE", headers: { ...authHeaders(), "Acp-Connection-Id": conn } }).catch(() => {});
      return;
    }
  }
}

try {
  if (cfg.raw) {
    await runRaw();
  } else {
    await runSteps(await load("@agentclientprotocol/sdk"));
  }
} catch (e) {
  result.fatal = errorFacts(e).message;
}
await finish(0);
