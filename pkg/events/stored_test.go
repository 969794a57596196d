package events_test

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"skein.dev/pkg/events"
)

var updateStored = flag.Bool("update-stored", false, "add to testdata/stored the bytes of each variant that no file there holds yet")

// storedDir holds the bytes of every variant as a build of Skein wrote
// them: <Variant>.msgpack, then <Variant>.2.msgpack and on for each later
// shape. A log, a KV bucket and a data directory keep what an earlier
// build stored, and every later build must read it: once a release has
// shipped, a file is never rewritten or removed. Before one, a shape no
// release wrote may be replaced, its files removed in the same change.
const storedDir = "testdata/stored"

// TestStoredBytesStillRead: the bytes every earlier shape of a variant was
// stored in still decode into that variant, and encode again to the same
// bytes, so that decoding them loses, renames or retypes no field. A change
// that fails it changes a stored format: give the change a version (a new
// variant name, or a new codec version with a decoder of the old one), and
// keep the old bytes here.
func TestStoredBytesStillRead(t *testing.T) {
	for name, files := range storedFiles(t) {
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			v, err := events.Unmarshal(b)
			if err != nil {
				t.Errorf("%s: the bytes an earlier build stored no longer decode: %v", f, err)
				continue
			}
			if v.VariantName() != name {
				t.Errorf("%s decodes as %s", f, v.VariantName())
				continue
			}
			again, err := events.Marshal(v)
			if err != nil {
				t.Errorf("%s: Marshal(Unmarshal) = %v", f, err)
				continue
			}
			if !bytes.Equal(again, b) {
				t.Errorf("%s: decoding the bytes an earlier build stored loses or changes a field of %s (encoded again: %d bytes, stored: %d)",
					f, name, len(again), len(b))
			}
		}
	}
}

// TestStoredBytesKept: testdata/stored holds the bytes of every variant as
// the codec writes it now, so that the next change of its shape is checked
// against them. A variant whose bytes changed in a way old bytes survive
// (a new field they may lack) is added with -update-stored.
func TestStoredBytesKept(t *testing.T) {
	stored := storedFiles(t)
	for _, name := range variantNames() {
		v := newVariant(t, name)
		fillVariant(t, v)
		b := mustMarshal(t, v)
		held := slices.ContainsFunc(stored[name], func(f string) bool {
			old, err := os.ReadFile(f)
			return err == nil && bytes.Equal(old, b)
		})
		switch {
		case held:
		case *updateStored:
			f := filepath.Join(storedDir, name+".msgpack")
			if n := len(stored[name]); n > 0 {
				f = filepath.Join(storedDir, fmt.Sprintf("%s.%d.msgpack", name, n+1))
			}
			if err := os.WriteFile(f, b, 0o644); err != nil {
				t.Fatal(err)
			}
		default:
			t.Errorf("no file in %s holds %s as the codec writes it now: once TestStoredBytesStillRead passes, add it with go test -run TestStoredBytes -update-stored", storedDir, name)
		}
	}
}

// storedFiles returns the files of testdata/stored by the variant whose
// bytes they hold.
func storedFiles(t *testing.T) map[string][]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(storedDir, "*.msgpack"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, f := range files {
		name, _, _ := strings.Cut(filepath.Base(f), ".")
		out[name] = append(out[name], f)
	}
	for _, fs := range out {
		slices.Sort(fs)
	}
	return out
}
