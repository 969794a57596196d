// Package acpbridge serves an ACP client as an ACP agent whose sessions
// are Skein's: an editor that speaks the Agent Client Protocol to an agent
// process (Zed, JetBrains, Neovim, the official SDKs' clients) talks to
// the bridge instead, and its threads become durable sessions that outlive
// the editor, the connection and the agent process.
//
// The bridge is one behaviour behind two doors: skein acp runs it on its
// own stdio, and the gateway runs it for each connection of its /acp
// endpoint (WebSocket or Streamable HTTP). Either way it is a client of
// Skein's public HTTP API, with the caller's token: what a token may do
// over HTTP it may do over ACP, and nothing more.
//
// One connection (Serve) handles:
//
//   - initialize: protocol version 1, loadSession, session list, resume
//     and close, and the prompt capabilities of the default agent as Skein
//     last saw them;
//   - session/new: opens a Skein session, whose ID is the ACP sessionId;
//   - session/load: replays the session's durable history as session/update
//     notifications, in log order, then follows it live; session/resume
//     follows it live without the replay; session/close stops following it
//     on this connection only;
//   - session/prompt: a Skein prompt, keyed so that the same request sent
//     again joins its turn; the answer comes once every update of the turn
//     was forwarded;
//   - session/cancel, session/set_config_option, session/set_mode, and
//     session/list;
//   - the session's permission and input requests, raised to the client as
//     session/request_permission and elicitation/create: the first answer
//     anywhere wins, and a request answered elsewhere is withdrawn from the
//     client with $/cancel_request.
//
// Every update that comes from a durable event carries its place in the
// log, _meta["skein/sequence"] and _meta["skein/eventNo"].
package acpbridge
