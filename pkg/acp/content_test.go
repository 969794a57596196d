package acp_test

import (
	"testing"

	"skein.dev/pkg/acp"
)

func TestParsePromptCapabilities(t *testing.T) {
	all := acp.PromptCapabilities{Image: true, Audio: true, EmbeddedContext: true}
	for _, tc := range []struct {
		name string
		caps string
		want acp.PromptCapabilities
	}{
		{"all", `{"loadSession":true,"promptCapabilities":{"image":true,"audio":true,"embeddedContext":true}}`, all},
		{"some", `{"promptCapabilities":{"image":true,"embeddedContext":true}}`, acp.PromptCapabilities{Image: true, EmbeddedContext: true}},
		{"false", `{"promptCapabilities":{"image":false,"audio":false,"embeddedContext":false}}`, acp.PromptCapabilities{}},
		{"no promptCapabilities", `{"loadSession":true}`, acp.PromptCapabilities{}},
		{"empty promptCapabilities", `{"promptCapabilities":{}}`, acp.PromptCapabilities{}},
		{"null promptCapabilities", `{"promptCapabilities":null}`, acp.PromptCapabilities{}},
		{"none at all", ``, acp.PromptCapabilities{}},
		{"null", `null`, acp.PromptCapabilities{}},
		{"not an object", `[true]`, acp.PromptCapabilities{}},
		{"not JSON", `{"promptCapabilities":{"image":true}`, acp.PromptCapabilities{}},
		{"a string is not true", `{"promptCapabilities":{"image":"true","audio":1,"embeddedContext":{}}}`, acp.PromptCapabilities{}},
		{"names are exact", `{"promptCapabilities":{"Image":true,"AUDIO":true,"embeddedcontext":true}}`, acp.PromptCapabilities{}},
		{"escaped names", `{"promptCapabilities":{"\u0069mage":true}}`, acp.PromptCapabilities{Image: true}},
		{"a repeated member", `{"promptCapabilities":{"image":false,"image":true,"audio":true}}`, acp.PromptCapabilities{}},
		{"repeated promptCapabilities", `{"promptCapabilities":{},"promptCapabilities":{"image":true}}`, acp.PromptCapabilities{}},
		{"other members kept apart", `{"image":true,"promptCapabilities":{"audio":true},"embeddedContext":true}`, acp.PromptCapabilities{Audio: true}},
	} {
		if got := acp.ParsePromptCapabilities([]byte(tc.caps)); got != tc.want {
			t.Errorf("%s: ParsePromptCapabilities(%s) = %+v, want %+v", tc.name, tc.caps, got, tc.want)
		}
	}
}

func TestPromptCapabilityAllows(t *testing.T) {
	for _, tc := range []struct {
		block, capability string
	}{
		{acp.BlockText, ""},
		{acp.BlockResourceLink, ""},
		{"x_unknown", ""},
		{"", ""},
		{acp.BlockImage, acp.CapabilityImage},
		{acp.BlockAudio, acp.CapabilityAudio},
		{acp.BlockResource, acp.CapabilityEmbeddedContext},
	} {
		if got := acp.PromptCapability(tc.block); got != tc.capability {
			t.Errorf("PromptCapability(%q) = %q, want %q", tc.block, got, tc.capability)
		}
		none := acp.PromptCapabilities{}
		if got, want := none.Allows(tc.block), tc.capability == ""; got != want {
			t.Errorf("an agent that advertised nothing: Allows(%q) = %v, want %v", tc.block, got, want)
		}
		only := acp.ParsePromptCapabilities([]byte(`{"promptCapabilities":{"` + tc.capability + `":true}}`))
		if !only.Allows(tc.block) {
			t.Errorf("an agent that advertised %q: Allows(%q) = false, want true", tc.capability, tc.block)
		}
	}
	// Each capability lets in its own type only.
	image := acp.PromptCapabilities{Image: true}
	if image.Allows(acp.BlockAudio) || image.Allows(acp.BlockResource) {
		t.Errorf("image alone allows audio or resource blocks")
	}
}
