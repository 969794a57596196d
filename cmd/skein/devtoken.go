package main

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"skein.dev/cmd/skein/internal/cli"
	"skein.dev/pkg/events"
	"skein.dev/services/gateway"
)

// devPrincipal is the principal of skein dev's token.
const devPrincipal = "dev"

// ensureDevToken returns the token in <dataDir>/dev-token, first writing a
// random one there (mode 0600) if the file does not exist. created reports
// that it did. The token is never printed: the CLI reads the file.
func ensureDevToken(dataDir string) (token, path string, created bool, err error) {
	path = filepath.Join(dataDir, cli.DevTokenFile)
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return "", path, false, err
	}
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		token = strings.TrimSpace(string(b))
		if token == "" || strings.ContainsAny(token, " \t\r\n") {
			return "", path, false, fmt.Errorf("%s: not a token: remove it, and skein dev writes a new one", path)
		}
		return token, path, false, nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", path, false, err
	}
	token = rand.Text() // 26 base32 characters: 130 bits from crypto/rand
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", path, false, err
	}
	if _, err := f.WriteString(token + "\n"); err != nil {
		f.Close()
		return "", path, false, err
	}
	if err := f.Close(); err != nil {
		return "", path, false, err
	}
	return token, path, true, nil
}

// devTokens returns the gateway tokens of skein dev: its token, an admin of
// the default namespace.
func devTokens(token string) []gateway.Token {
	return []gateway.Token{{
		SHA256:     gateway.HashToken(token),
		Principal:  devPrincipal,
		Namespaces: []string{string(events.DefaultNamespace)},
		Role:       gateway.RoleAdmin,
	}}
}
