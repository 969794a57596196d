package adapterrunner

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"unicode/utf8"

	"skein.dev/pkg/events"
)

// A prompt names an uploaded file with a resource_link content block whose
// uri is "skein-attachment:<name>" (events.AttachmentScheme). The session
// log keeps the block as the client sent it; the runner, which holds the
// file, rewrites it just before the prompt is written to the adapter:
//
//   - as an embedded resource ({"type":"resource"}, the file's text, or
//     its bytes in base64 when they are not UTF-8) when the agent
//     advertised promptCapabilities.embeddedContext and the file is at
//     most Config.FileEmbedMaxBytes;
//   - else as a resource_link to the file's file:// URI, with its name,
//     size and media type.
//
// A file that is missing (removed since it was uploaded) or cannot be read
// still goes as a file:// link: the prompt was accepted already and must
// be delivered once, unchanged in what it asks; the agent finds the file
// gone, as it would any file the prompt names.

// rewritePrompt returns prompt with each block that names an upload
// replaced as above; prompt itself when none does. cwd is the adapter's
// working directory's path (for the file:// URIs), root the directory
// itself, as the adapter's held cwd (nil: none is read), and embed whether
// its agent takes embedded resources. Every other block keeps its bytes.
func (s *fileStore) rewritePrompt(cwd string, root *os.Root, embed bool, prompt events.JSON) events.JSON {
	if !bytes.Contains(prompt, []byte(events.AttachmentScheme)) {
		return prompt
	}
	var blocks []json.RawMessage
	if json.Unmarshal(prompt, &blocks) != nil {
		return prompt // the session service checked it; nothing to do
	}
	changed := false
	for i, b := range blocks {
		name, ok, err := events.AttachmentRef(b)
		if !ok || err != nil {
			continue
		}
		if nb := s.attachmentBlock(cwd, root, name, b, embed); nb != nil {
			blocks[i], changed = nb, true
		}
	}
	if !changed {
		return prompt
	}
	// Joined as they are: the blocks not rewritten keep their bytes.
	return events.JSON(append(append([]byte("["), bytes.Join(blocks2bytes(blocks), []byte(","))...), ']'))
}

func blocks2bytes(blocks []json.RawMessage) [][]byte {
	out := make([][]byte, len(blocks))
	for i, b := range blocks {
		out[i] = b
	}
	return out
}

// attachmentBlock returns the block that replaces block, which names the
// upload name; nil to keep block.
func (s *fileStore) attachmentBlock(cwd string, root *os.Root, name string, block json.RawMessage, embed bool) json.RawMessage {
	rel := events.AttachmentDir + "/" + name
	abs := filepath.Join(cwd, filepath.FromSlash(rel))
	uri := (&url.URL{Scheme: "file", Path: filepath.ToSlash(abs)}).String()
	mt := mediaType(rel)

	var size *int64
	var content []byte
	if root != nil {
		if f, info, err := openRegular(root, rel); err == nil {
			n := info.Size()
			size = &n
			if embed && n <= s.embedMax {
				content, _ = io.ReadAll(io.LimitReader(f, s.embedMax+1))
				if int64(len(content)) > s.embedMax {
					content = nil
				}
			}
			f.Close()
		}
	}
	if content != nil {
		res := map[string]any{"uri": uri}
		if mt != "" {
			res["mimeType"] = mt
		}
		if utf8.Valid(content) {
			res["text"] = string(content)
		} else {
			res["blob"] = base64.StdEncoding.EncodeToString(content)
		}
		return marshalBlock(map[string]any{"type": "resource", "resource": res})
	}
	// A link keeps the client's other members (title, description,
	// annotations); uri is the file's, and name, size and mimeType are
	// filled in where the client gave none.
	var fields map[string]json.RawMessage
	if json.Unmarshal(block, &fields) != nil {
		return nil
	}
	set := func(k string, v any, always bool) {
		if _, has := fields[k]; has && !always {
			return
		}
		if b, err := json.Marshal(v); err == nil {
			fields[k] = b
		}
	}
	set("uri", uri, true)
	set("name", name, false)
	if size != nil {
		set("size", *size, false)
	}
	if mt != "" {
		set("mimeType", mt, false)
	}
	return marshalBlock(fields)
}

// marshalBlock encodes a content block as the agent gets it, without
// encoding/json's HTML escapes (a file's text keeps its < and &); nil when
// it cannot.
func marshalBlock(v any) json.RawMessage {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if enc.Encode(v) != nil {
		return nil
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}
