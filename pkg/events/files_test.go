package events_test

import (
	"errors"
	"path"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"skein.dev/pkg/events"
)

func TestCheckUploadName(t *testing.T) {
	for _, ok := range []string{"a.txt", "report (1).pdf", "é", strings.Repeat("n", events.MaxFileNameBytes), "a..b"} {
		if err := events.CheckUploadName(ok); err != nil {
			t.Errorf("CheckUploadName(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"", ".", "..", ".env", "a/b", `a\b`, "a\x00", "a\nb", "\xff", strings.Repeat("n", events.MaxFileNameBytes+1), "/etc"} {
		if err := events.CheckUploadName(bad); !errors.Is(err, events.ErrInvalidRequest) {
			t.Errorf("CheckUploadName(%q) = %v, want invalid_request", bad, err)
		}
	}
}

func TestCleanFilePath(t *testing.T) {
	for in, want := range map[string]string{"": ".", ".": ".", "a": "a", "a/./b/": "a/b", "a//b": "a/b", ".skein-attachments/x": ".skein-attachments/x"} {
		if got, err := events.CleanFilePath(in); err != nil || got != want {
			t.Errorf("CleanFilePath(%q) = %q, %v, want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"..", "../x", "a/../../x", "a/..", "/etc/passwd", `a\..\b`, "a\x00b", "\xff", strings.Repeat("a", events.MaxFilePathBytes+1)} {
		if got, err := events.CleanFilePath(bad); !errors.Is(err, events.ErrInvalidRequest) {
			t.Errorf("CleanFilePath(%q) = %q, %v, want invalid_request", bad, got, err)
		}
	}
}

func TestTransferRunner(t *testing.T) {
	id := events.TransferID("r-1", "ABC123")
	if r, err := events.TransferRunner(id); err != nil || r != "r-1" {
		t.Errorf("TransferRunner(%q) = %q, %v", id, r, err)
	}
	for _, bad := range []string{"", "r1", "r1~", "~abc", "r.1~abc", "r1~a-b", "r1~abc~def", "r1~a*", "r1~a.>"} {
		if _, err := events.TransferRunner(bad); !errors.Is(err, events.ErrInvalidRequest) {
			t.Errorf("TransferRunner(%q) = %v, want invalid_request", bad, err)
		}
	}
}

// TestFileChunkSize: a chunk follows the connection's limit, and with its
// envelope always fits.
func TestFileChunkSize(t *testing.T) {
	for maxPayload, want := range map[int64]int64{8 << 20: events.MaxFileChunk, 1 << 20: 1<<20 - 64<<10, 64 << 20: events.MaxFileChunk} {
		if got := events.FileChunkSize(maxPayload); got != want {
			t.Errorf("FileChunkSize(%d) = %d, want %d", maxPayload, got, want)
		}
	}
}

// FuzzFileRequests decodes arbitrary bytes as each file request: never a
// panic, and a request that validates names a valid session, and a path
// or name that cannot leave the working directory.
func FuzzFileRequests(f *testing.F) {
	for _, r := range []events.Variant{
		&events.FileBeginRequest{Name: "a.txt", Size: 3},
		&events.FileBeginRequest{SessionID: new("s1"), Name: "../a", Size: -1},
		&events.FileWriteRequest{TransferID: "r1~abc", Offset: 7, Data: []byte("xyz")},
		&events.FileWriteRequest{TransferID: "r1~abc", Offset: -1},
		&events.FileCommitRequest{TransferID: "r.1~abc"},
		&events.FileCancelRequest{TransferID: "r1~"},
		&events.FileListRequest{Path: "a/../../b"},
		&events.FileReadRequest{Path: "/etc/passwd", Offset: 1 << 40, Length: -3},
	} {
		b, err := events.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := events.Unmarshal(data)
		if err != nil {
			return
		}
		var sid events.SessionID
		switch r := v.(type) {
		case *events.FileBeginRequest:
			if sid, err = r.Validate(); err == nil && (events.CheckUploadName(r.Name) != nil || strings.ContainsAny(r.Name, `/\`) || r.Size < 0) {
				t.Fatalf("Validate accepted %+v", r)
			}
		case *events.FileWriteRequest:
			if sid, err = r.Validate(); err == nil && (r.Offset < 0 || len(r.Data) > events.MaxFileChunk || strings.ContainsAny(r.TransferID, ".*> ")) {
				t.Fatalf("Validate accepted %+v", r)
			}
		case *events.FileCommitRequest:
			sid, err = r.Validate()
		case *events.FileCancelRequest:
			sid, err = r.Validate()
		case *events.FileListRequest:
			sid, err = r.Validate()
		case *events.FileReadRequest:
			if sid, err = r.Validate(); err == nil && (r.Offset < 0 || r.Length < 0) {
				t.Fatalf("Validate accepted %+v", r)
			}
		default:
			return
		}
		if err == nil && !sid.Valid() {
			t.Fatalf("Validate of %s gave session %q", v.VariantName(), sid)
		}
	})
}

// An upload's name is shown in listings and prompts: characters that hide
// or reorder text once made one read as another ("invoice\u202Efdp.exe"
// shows as "invoiceexe.pdf"). They are refused at begin, invalid_request,
// but a joiner of two pictographs.
func TestSecurityUploadNamesHideNoText(t *testing.T) {
	bad := []string{
		"invoice\u202efdp.exe", "a\u202ab", "a\u202bb", "a\u202cb", "a\u202db", "\u2066x\u2069", "\u2067x", "\u2068x",
		"a\u061cb", "a\u200eb", "a\u200fb", "ad\u200bmin", "a\u200cb", "pay\u200dpal", "a\u2060b", "\ufeffa",
		"soft\u00adhyphen", "tag\U000e0041", "filler\u3164", "\u115fx", "a\u180eb", "a\u2064b",
	}
	refused := 0
	for _, name := range bad {
		if err := events.CheckUploadName(name); errors.Is(err, events.ErrInvalidRequest) {
			refused++
		} else {
			t.Errorf("CheckUploadName(%q) = %v, want invalid_request", name, err)
		}
		b := &events.FileBeginRequest{Name: name, Size: 1}
		if _, err := b.Validate(); !errors.Is(err, events.ErrInvalidRequest) {
			t.Errorf("begin of %q = %v, want invalid_request", name, err)
		}
	}
	t.Logf("%d of %d hiding names refused", refused, len(bad))
	for _, ok := range []string{"👩‍💻.png", "🏳️‍🌈 flag.txt", "👩🏽‍💻 notes.md", "日本語.txt", "café.txt"} {
		if err := events.CheckUploadName(ok); err != nil {
			t.Errorf("CheckUploadName(%q) = %v, want nil", ok, err)
		}
	}
}

// FuzzHiddenRune: HiddenRune finds a rune that hides text whenever one is
// in s but for a joiner it allows, which then sits between a pictograph
// (or skin tone) and a pictograph; CheckUploadName and NormalizeTitle
// accept nothing it finds.
func FuzzHiddenRune(f *testing.F) {
	for _, s := range []string{"", "a", "invoice\u202efdp.exe", "👩‍💻", "\u200d", "a\u200d👩", "👩\u200d", "🏳️‍🌈", "x\U000e0041", "\xff\u200d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, found := events.HiddenRune(s)
		if found && !events.HidesText(r) {
			t.Fatalf("HiddenRune(%q) = %U, which hides nothing", s, r)
		}
		if !found {
			runes := []rune(s)
			for i, r := range runes {
				if !events.HidesText(r) {
					continue
				}
				if r != '\u200d' || i == 0 || i == len(runes)-1 || !unicode.Is(unicode.So, runes[i+1]) || runes[i+1] == utf8.RuneError {
					t.Fatalf("HiddenRune(%q) found nothing; %U at %d hides text", s, r, i)
				}
			}
		}
		if found && events.CheckUploadName(s) == nil {
			t.Fatalf("CheckUploadName accepted %q, which hides %U", s, r)
		}
		if _, err := events.NormalizeTitle(s); found && err == nil {
			t.Fatalf("NormalizeTitle accepted %q, which hides %U", s, r)
		}
	})
}

// FuzzFileNames: a path CleanFilePath accepts stays under the directory
// once cleaned (relative, no ".." element), and a name CheckUploadName
// accepts is one element, not hidden.
func FuzzFileNames(f *testing.F) {
	for _, s := range []string{"", "a", "../a", "a/../..", "/x", ".x", "a/./b", "é/ü", "a\\b", "..\x00", "…/.."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if p, err := events.CleanFilePath(s); err == nil {
			if path.IsAbs(p) || p == ".." || strings.HasPrefix(p, "../") || strings.Contains(p, "/../") || !utf8.ValidString(p) {
				t.Fatalf("CleanFilePath(%q) = %q", s, p)
			}
			if p != path.Clean(p) {
				t.Fatalf("CleanFilePath(%q) = %q, not clean", s, p)
			}
		}
		if events.CheckUploadName(s) == nil {
			if s == "" || strings.ContainsAny(s, `/\`) || strings.HasPrefix(s, ".") || len(s) > events.MaxFileNameBytes ||
				strings.ContainsFunc(s, unicode.IsControl) {
				t.Fatalf("CheckUploadName accepted %q", s)
			}
		}
	})
}
