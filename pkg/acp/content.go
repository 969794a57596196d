package acp

import "bytes"

// Types of a ContentBlock (the schema's ContentBlock union), as a prompt
// carries them.
const (
	BlockText         = "text"
	BlockImage        = "image"
	BlockAudio        = "audio"
	BlockResourceLink = "resource_link"
	BlockResource     = "resource" // an embedded resource: its text or blob inline
)

// Members of agentCapabilities.promptCapabilities: each lets a client send
// prompt blocks of one more type. Every agent takes text and resource_link
// blocks; image, audio and embedded resource blocks only when it said so.
const (
	CapabilityImage           = "image"
	CapabilityAudio           = "audio"
	CapabilityEmbeddedContext = "embeddedContext"
)

// PromptCapabilities is what an agent's initialize result advertised in
// agentCapabilities.promptCapabilities. ACP defaults every member to
// false, and a client must not send a prompt block the agent did not
// advertise.
type PromptCapabilities struct {
	Image           bool
	Audio           bool
	EmbeddedContext bool
}

// ParsePromptCapabilities reads the promptCapabilities of an
// agentCapabilities object, as the agent wrote it. A member counts only
// when it is the literal true: one that is absent, null, of another type
// or under a name of another case is false, and so is every member when
// agentCapabilities is not a JSON object, or when promptCapabilities or
// one of its members repeats (readers differ on which value counts). A
// client then sends no more than the agent plainly advertised.
func ParsePromptCapabilities(agentCapabilities []byte) PromptCapabilities {
	var caps, image, audio, embedded []byte
	err := Lookup(agentCapabilities, Field{Name: "promptCapabilities", Value: &caps, Fields: []Field{
		{Name: CapabilityImage, Value: &image},
		{Name: CapabilityAudio, Value: &audio},
		{Name: CapabilityEmbeddedContext, Value: &embedded},
	}})
	if err != nil {
		return PromptCapabilities{}
	}
	yes := []byte("true")
	return PromptCapabilities{Image: bytes.Equal(image, yes), Audio: bytes.Equal(audio, yes), EmbeddedContext: bytes.Equal(embedded, yes)}
}

// PromptCapability returns the member of promptCapabilities that an agent
// must have advertised to be sent a prompt block of type blockType, or ""
// when every agent takes it: text, resource_link, and types ACP does not
// define, which are the agent's to refuse.
func PromptCapability(blockType string) string {
	switch blockType {
	case BlockImage:
		return CapabilityImage
	case BlockAudio:
		return CapabilityAudio
	case BlockResource:
		return CapabilityEmbeddedContext
	}
	return ""
}

// Allows reports whether an agent that advertised c takes a prompt block
// of type blockType.
func (c PromptCapabilities) Allows(blockType string) bool {
	switch PromptCapability(blockType) {
	case CapabilityImage:
		return c.Image
	case CapabilityAudio:
		return c.Audio
	case CapabilityEmbeddedContext:
		return c.EmbeddedContext
	}
	return true
}
