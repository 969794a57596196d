package gateway

import (
	"testing"

	"skein.dev/pkg/events"
)

// FuzzDecodeFileBodies decodes arbitrary bodies as an upload's begin and
// chunk: never a panic, and what decodes is a request that validates,
// with a chunk no larger than allowed.
func FuzzDecodeFileBodies(f *testing.F) {
	for _, s := range []string{
		`{"name":"a.txt","size":3}`, `{"name":"../a","size":1}`, `{"name":".x","size":-1}`, `{"name":"a"}`,
		`{"offset":0,"data":"aGk="}`, `{"offset":-1,"data":"aGk="}`, `{"offset":1,"data":"!!"}`, `{"offset":1}`, `{}`, `[]`,
	} {
		f.Add([]byte(s))
	}
	const chunk = 8
	f.Fuzz(func(t *testing.T, body []byte) {
		if req, err := decodeBegin(body, "s1"); err == nil {
			if events.CheckUploadName(req.Name) != nil || req.Size < 0 || *req.SessionID != "s1" {
				t.Fatalf("decodeBegin(%q) = %+v", body, req)
			}
		}
		if req, err := decodeChunk(body, "s1", "r1~abc", chunk); err == nil {
			if req.Offset < 0 || len(req.Data) > chunk || req.TransferID != "r1~abc" {
				t.Fatalf("decodeChunk(%q) = %+v", body, req)
			}
		}
	})
}
