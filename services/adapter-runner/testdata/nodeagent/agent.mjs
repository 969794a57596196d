// A minimal ACP agent for node, run as `node agent.mjs` the way ACP guides
// register one: it answers initialize, session/new and session/prompt over
// stdio JSON-RPC. A prompt line "read PATH" is answered with an update
// "read PATH: ok TEXT" or "read PATH: error CODE"; any other prompt with
// "ok". With READ_AT_START set, it reads that file before anything else,
// and dies if it cannot, as an agent whose configuration is denied does.
import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";

if (process.env.READ_AT_START) {
  readFileSync(process.env.READ_AT_START);
}

const send = (msg) => process.stdout.write(JSON.stringify({ jsonrpc: "2.0", ...msg }) + "\n");

function readProbe(path) {
  try {
    return `read ${path}: ok ${readFileSync(path, "utf8")}`;
  } catch (e) {
    return `read ${path}: error ${e.code}`;
  }
}

createInterface({ input: process.stdin }).on("line", (line) => {
  const req = JSON.parse(line);
  if (req.id === undefined || req.method === undefined) {
    return;
  }
  switch (req.method) {
    case "initialize":
      send({ id: req.id, result: { protocolVersion: 1, agentCapabilities: {}, authMethods: [],
        agentInfo: { name: "node-agent", version: "0.0.0" } } });
      break;
    case "session/new":
      send({ id: req.id, result: { sessionId: "node-1" } });
      break;
    case "session/prompt": {
      const text = req.params.prompt.map((b) => b.text ?? "").join("\n");
      const lines = text.split("\n").filter((l) => l !== "");
      for (const l of lines.length ? lines : [""]) {
        const reply = l.startsWith("read ") ? readProbe(l.slice(5)) : "ok";
        send({ method: "session/update", params: { sessionId: req.params.sessionId,
          update: { sessionUpdate: "agent_message_chunk", content: { type: "text", text: reply } } } });
      }
      send({ id: req.id, result: { stopReason: "end_turn" } });
      break;
    }
    default:
      send({ id: req.id, error: { code: -32601, message: "method not found" } });
  }
});
