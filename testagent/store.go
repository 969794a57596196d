package testagent

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// storedSession is the state-dir file of one session, <dir>/<sessionId>.json.
// It holds everything a later process needs to load or resume the session
// and continue its id sequences.
type storedSession struct {
	SessionID string            `json:"session_id"`
	Cwd       string            `json:"cwd"`
	Mode      string            `json:"mode"`
	Model     string            `json:"model"`
	NextMsg   int               `json:"next_msg"`
	NextUser  int               `json:"next_user"`
	Tools     map[string]string `json:"tools"`   // announced tool call id -> title, for toolstep and permission
	History   []json.RawMessage `json:"history"` // session/update objects to replay on load
}

// newSessionID returns a fresh id. Ids are file names in the state dir, so
// they only use [a-z0-9_].
func newSessionID() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return "sess_" + hex.EncodeToString(b[:])
}

// validSessionID reports whether id could have come from newSessionID,
// which is what makes it safe to use as a file name.
func validSessionID(id string) bool {
	if len(id) == 0 || len(id) > 128 {
		return false
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// errNoSession is returned by readSession for an id the dir does not hold.
var errNoSession = errors.New("session not stored")

func sessionPath(dir, id string) string { return filepath.Join(dir, id+".json") }

// writeSession stores s atomically: a reader sees the old or the new file,
// never a torn one, even if the process crashes mid-write.
func writeSession(dir string, s *storedSession) error {
	b, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("encode session %s: %w", s.SessionID, err)
	}
	f, err := os.CreateTemp(dir, "."+s.SessionID+"-*.tmp")
	if err != nil {
		return fmt.Errorf("store session %s: %w", s.SessionID, err)
	}
	_, werr := f.Write(b)
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("store session %s: %w", s.SessionID, err)
	}
	if err := os.Rename(f.Name(), sessionPath(dir, s.SessionID)); err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("store session %s: %w", s.SessionID, err)
	}
	return nil
}

// readSession loads the session id from dir, or returns errNoSession.
func readSession(dir, id string) (*storedSession, error) {
	if !validSessionID(id) {
		return nil, errNoSession
	}
	b, err := os.ReadFile(sessionPath(dir, id))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errNoSession
	}
	if err != nil {
		return nil, fmt.Errorf("read session %s: %w", id, err)
	}
	var s storedSession
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("decode session %s: %w", id, err)
	}
	if s.SessionID != id {
		return nil, fmt.Errorf("session file %s holds session %q", sessionPath(dir, id), s.SessionID)
	}
	return &s, nil
}
