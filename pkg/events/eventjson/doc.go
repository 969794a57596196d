// Package eventjson renders events as JSON for people: the public JSON
// form of events (Durable, Ephemeral) and the record form of any variant
// (Record, for skein decode).
//
// The public JSON form of events. The gateway, the CLI and the SSE stream
// show events to clients as one flat JSON object per event: Skein's
// envelope (identity, sequence, durability, type), then the native ACP
// fields. The internal wrappers of the schema (AcpDurableSessionUpdate's
// update, the permission request and response objects) never appear, as
// the schema's comment on AcpDurableEvent requires.
//
// Native members, keys and values, are copied byte for byte, never
// re-encoded, so unknown fields, _meta, number spellings and key order
// survive exactly as the adapter wrote them. They are read with pkg/acp's
// member reader (acp.Members), Skein's one scanner of raw JSON.
package eventjson
