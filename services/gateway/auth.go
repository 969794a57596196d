package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"skein.dev/internal/lifecycle"
	"skein.dev/pkg/events"
)

// HeaderNamespace picks one of the token's namespaces for a request. Without
// it the request acts in the token's first namespace.
const HeaderNamespace = "X-Skein-Namespace"

// DefaultTokensReload is how often a request checks the tokens file for a
// change (AuthConfig.TokensReload).
const DefaultTokensReload = time.Second

// Role says what a principal may do in its namespaces.
type Role string

// The roles. An admin may do what a user may; read may get, list, read
// history and watch (every GET), but not open, prompt, answer, cancel,
// unload, rename, configure or delete.
const (
	RoleAdmin Role = "admin"
	RoleUser  Role = "user"
	RoleRead  Role = "read"
)

// Token is one entry of a tokens file: the principal that holds the token
// whose SHA-256 is SHA256. The file never holds a token itself.
type Token struct {
	SHA256     string   `json:"sha256"` // 64 hex digits: HashToken of the token
	Principal  string   `json:"principal"`
	Namespaces []string `json:"namespaces"` // the first is the default
	Role       Role     `json:"role"`
}

// HashToken returns what a tokens file stores of token: its SHA-256 in hex.
func HashToken(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}

// AuthConfig configures the bearer tokens the gateway accepts. With neither
// TokensFile nor Tokens the gateway serves without authentication, in
// events.DefaultNamespace: skein serve refuses that unless InsecureNoAuth
// says it is meant.
type AuthConfig struct {
	// TokensFile is a JSON array of Token. It is read when the gateway is
	// created (a bad file stops the start) and again when it changes: a
	// request checks it at most every TokensReload. A changed file that
	// does not parse is logged, and the tokens read before stay.
	TokensFile   string
	TokensReload time.Duration
	// InsecureNoAuth serves every route without authentication. It
	// cannot be combined with tokens.
	InsecureNoAuth bool
	// Tokens are accepted beside the file's: skein dev's token.
	Tokens []Token
}

// RegisterFlags registers the flags under "gateway." names.
func (c *AuthConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.TokensFile, "gateway.tokens-file", "", "JSON file of bearer tokens: [{\"sha256\",\"principal\",\"namespaces\",\"role\"}], reloaded when it changes")
	fs.DurationVar(&c.TokensReload, "gateway.tokens-reload", DefaultTokensReload, "how often requests check the tokens file for a change")
	fs.BoolVar(&c.InsecureNoAuth, "gateway.insecure-no-auth", false, "serve without authentication, every request in namespace default (never on a network others reach)")
}

// Enabled reports whether requests must carry a bearer token.
func (c *AuthConfig) Enabled() bool { return c.TokensFile != "" || len(c.Tokens) > 0 }

// validate reports every invalid field.
func (c *AuthConfig) validate() []error {
	var errs []error
	if c.TokensReload < 0 {
		errs = append(errs, fmt.Errorf("gateway.tokens-reload must not be negative, got %v", c.TokensReload))
	}
	if c.InsecureNoAuth && c.Enabled() {
		errs = append(errs, errors.New("gateway.insecure-no-auth cannot be combined with tokens"))
	}
	if _, err := compileTokens(c.Tokens); err != nil {
		errs = append(errs, fmt.Errorf("gateway tokens: %w", err))
	}
	return errs
}

// ParseTokens parses a tokens file: a JSON array of Token, each with a
// distinct SHA256 of 64 hex digits, a principal, at least one valid
// namespace (none twice) and a role. Unknown fields are errors, so that a
// misspelt one does not grant less, or more, than meant. Errors name an
// entry by its index, never by its hash.
func ParseTokens(b []byte) ([]Token, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var tokens []Token
	if err := dec.Decode(&tokens); err != nil {
		return nil, fmt.Errorf("tokens: %w", err)
	}
	if dec.More() {
		return nil, errors.New("tokens: data after the array")
	}
	if _, err := compileTokens(tokens); err != nil {
		return nil, err
	}
	return tokens, nil
}

// principal is a compiled Token.
type principal struct {
	name       string
	namespaces []events.Namespace
	role       Role
	hash       [sha256.Size]byte
}

// tokenSet is every token the gateway accepts.
type tokenSet []principal

// compileTokens checks tokens and returns them as a tokenSet.
func compileTokens(tokens []Token) (tokenSet, error) {
	set := make(tokenSet, 0, len(tokens))
	for i, t := range tokens {
		p := principal{name: t.Principal, role: t.Role}
		if len(t.SHA256) != hex.EncodedLen(sha256.Size) {
			return nil, fmt.Errorf("token %d: sha256 must be %d hex digits", i, hex.EncodedLen(sha256.Size))
		}
		if _, err := hex.Decode(p.hash[:], []byte(t.SHA256)); err != nil {
			return nil, fmt.Errorf("token %d: sha256 is not hex", i)
		}
		if t.Principal == "" || len(t.Principal) > 256 {
			return nil, fmt.Errorf("token %d: principal must be 1 to 256 bytes", i)
		}
		switch t.Role {
		case RoleAdmin, RoleUser, RoleRead:
		default:
			return nil, fmt.Errorf("token %d (%s): role must be admin, user or read", i, t.Principal)
		}
		if len(t.Namespaces) == 0 {
			return nil, fmt.Errorf("token %d (%s): no namespaces", i, t.Principal)
		}
		for _, s := range t.Namespaces {
			ns := events.Namespace(s)
			if !ns.Valid() {
				return nil, fmt.Errorf("token %d (%s): namespace %q must match [a-z0-9][a-z0-9_-]{0,62}", i, t.Principal, s)
			}
			if slices.Contains(p.namespaces, ns) {
				return nil, fmt.Errorf("token %d (%s): namespace %q twice", i, t.Principal, s)
			}
			p.namespaces = append(p.namespaces, ns)
		}
		for j := range set {
			if set[j].hash == p.hash {
				return nil, fmt.Errorf("token %d (%s): the same token as token %d", i, t.Principal, j)
			}
		}
		set = append(set, p)
	}
	return set, nil
}

// lookup returns the principal of token, or nil. It hashes token and
// compares the hash with every entry's in constant time, so that neither
// where the first differing byte is nor which entry matched shows in the
// time it takes.
func (s tokenSet) lookup(token string) *principal {
	return s.lookupHash(sha256.Sum256([]byte(token)))
}

// lookupHash is lookup of the token whose SHA-256 is h.
func (s tokenSet) lookupHash(h [sha256.Size]byte) *principal {
	found := -1
	for i := range s {
		if subtle.ConstantTimeCompare(h[:], s[i].hash[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return nil
	}
	return &s[found]
}

// authenticator holds the tokens: the static ones and the file's, reloaded
// when the file changes.
type authenticator struct {
	cfg    AuthConfig
	lg     *slog.Logger
	static tokenSet

	set     atomic.Pointer[tokenSet] // static and the file's
	checked atomic.Int64             // when the file was last checked, in Unix nanoseconds

	mu    sync.Mutex  // serialises reloads
	stamp os.FileInfo // of the file the set holds

	// changed is closed, and replaced, each time a reload changes the
	// set: the open event streams and watches then check that their
	// caller still holds its grant, and end if it does not.
	changedMu sync.Mutex
	changed   chan struct{}
}

// newAuthenticator compiles cfg's tokens and reads its tokens file. It
// returns nil when authentication is off.
func newAuthenticator(cfg AuthConfig, lg *slog.Logger) (*authenticator, error) {
	if !cfg.Enabled() {
		return nil, nil
	}
	static, err := compileTokens(cfg.Tokens)
	if err != nil {
		return nil, err
	}
	a := &authenticator{cfg: cfg, lg: lg, static: static, changed: make(chan struct{})}
	a.set.Store(&static)
	if cfg.TokensFile != "" {
		if err := a.reload(time.Now()); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// tokens returns the current set, first reloading the tokens file if
// TokensReload passed since it was last checked and it changed. Only one
// request checks at a time; the others go on with the set they have.
func (a *authenticator) tokens() tokenSet {
	if a.cfg.TokensFile != "" {
		now := time.Now()
		if now.UnixNano()-a.checked.Load() >= int64(a.cfg.TokensReload) && a.mu.TryLock() {
			err := a.reload(now)
			a.mu.Unlock()
			if err != nil {
				a.lg.Error("tokens file not reloaded; the tokens read before stay", "file", a.cfg.TokensFile, events.LogKeyErr, err)
			}
		}
	}
	return *a.set.Load()
}

// reload reads the tokens file if it changed since the last read. On an
// error the set stays as it was. The caller holds a.mu, or is the only
// goroutine that knows a.
func (a *authenticator) reload(now time.Time) error {
	a.checked.Store(now.UnixNano())
	fi, err := os.Stat(a.cfg.TokensFile)
	if err != nil {
		return fmt.Errorf("tokens file: %w", err)
	}
	if a.stamp != nil && os.SameFile(a.stamp, fi) && a.stamp.ModTime().Equal(fi.ModTime()) && a.stamp.Size() == fi.Size() {
		return nil
	}
	b, err := os.ReadFile(a.cfg.TokensFile)
	if err != nil {
		return fmt.Errorf("tokens file: %w", err)
	}
	tokens, err := ParseTokens(b)
	if err != nil {
		return fmt.Errorf("tokens file %s: %w", a.cfg.TokensFile, err)
	}
	set, err := compileTokens(append(slices.Clone(a.cfg.Tokens), tokens...))
	if err != nil {
		return fmt.Errorf("tokens file %s beside the static tokens: %w", a.cfg.TokensFile, err)
	}
	a.set.Store(&set)
	a.stamp = fi
	a.changedMu.Lock()
	close(a.changed)
	a.changed = make(chan struct{})
	a.changedMu.Unlock()
	a.lg.Info("tokens file read", "file", a.cfg.TokensFile, "tokens", len(tokens))
	return nil
}

// changes returns a channel closed when the token set next changes.
func (a *authenticator) changes() <-chan struct{} {
	a.changedMu.Lock()
	defer a.changedMu.Unlock()
	return a.changed
}

// granted reports whether c's token is still in the set and still opens
// c's namespace.
func (a *authenticator) granted(c caller) bool {
	p := a.tokens().lookupHash(c.token)
	return p != nil && slices.Contains(p.namespaces, c.ns)
}

// watchTokens reloads the tokens file every TokensReload until ctx ends,
// so that a revocation reaches the open streams and watches (granted)
// even when no request comes to check the file.
func (a *authenticator) watchTokens(ctx context.Context) {
	if a.cfg.TokensFile == "" {
		return
	}
	every := a.cfg.TokensReload
	if every <= 0 { // every request checks; so does this, as often as by default
		every = DefaultTokensReload
	}
	lifecycle.Every(ctx, every, func() { a.tokens() })
}

// errUnauthenticated is the one answer to a request without a valid bearer
// token: it never says what was wrong.
var errUnauthenticated = &events.Error{Code: events.CodeUnauthenticated, Message: "a valid bearer token is required"}

// isPublic reports whether a route is served without a token.
func isPublic(rt route) bool { return rt.path == "/healthz" || rt.path == "/readyz" }

// isRead reports whether a route only reads: the read role may use it.
// /acp is open to every role: the bridge behind it calls the API with the
// caller's own token, and each route it reaches checks the role (acp.go).
// The webhook routes need a role that writes, their GETs included.
func isRead(rt route) bool {
	return (rt.method == http.MethodGet && !strings.HasPrefix(rt.path, webhookPath)) || rt.path == acpPath
}

// callerKey is the context key of the caller authorize resolved.
type callerKey struct{}

// caller is who a request acts for.
type caller struct {
	principal string
	ns        events.Namespace
	// token is the SHA-256 of the bearer token, by which a stream finds
	// whether its caller still holds the grant it was opened with, and
	// changed the channel of the token set's next change as it was before
	// the token was looked up.
	token   [sha256.Size]byte
	changed <-chan struct{}
}

// grantChanges returns a channel closed when the tokens change after r's
// caller was authenticated: nil, which never is, when authentication is
// off or r's route is public. An event stream or a watch selects on it,
// and then calls recheck.
func (g *Gateway) grantChanges(r *http.Request) <-chan struct{} {
	c, ok := r.Context().Value(callerKey{}).(caller)
	if !ok {
		return nil
	}
	return c.changed
}

// recheck is called once the tokens changed: it returns the error that
// ends r's stream or watch when its caller lost its grant, or else the
// channel of the next change. (The channel is taken before the check, so
// that no change falls between the two.)
func (g *Gateway) recheck(r *http.Request) (<-chan struct{}, error) {
	next := g.auth.changes()
	if err := g.revoked(r); err != nil {
		return nil, err
	}
	return next, nil
}

// revoked returns the error that ends an event stream or a watch of r when
// its caller no longer holds the grant it was opened with (its token was
// removed, or no longer opens its namespace), or nil.
func (g *Gateway) revoked(r *http.Request) error {
	c, ok := r.Context().Value(callerKey{}).(caller)
	if g.auth == nil || !ok || g.auth.granted(c) {
		return nil
	}
	return errRevoked
}

// errRevoked ends the streams and watches of a revoked grant.
var errRevoked = &events.Error{Code: events.CodeUnauthenticated, Message: "the bearer token no longer grants this stream"}

// principalOf returns the principal r acts for, or "" when authentication
// is off or the route is public.
func principalOf(r *http.Request) string {
	c, _ := r.Context().Value(callerKey{}).(caller)
	return c.principal
}

// authenticate returns req carrying who it acts for and in which
// namespace (Gateway.namespace, principalOf), or the error that answers
// it. A public route, or a gateway without authentication, passes req
// through as it is.
//
// The token is looked at first. A valid one is its principal's business
// alone (the per-principal limits, ratelimit.go): its address's backoff
// neither refuses it nor is cleared by it, since every client of a skein
// dev, and every client behind one proxy, shares an address. Only a
// request without a valid token counts against its address, and is
// refused unread while the address waits.
func (g *Gateway) authenticate(w http.ResponseWriter, req *http.Request, rt route) (*http.Request, error) {
	if g.auth == nil || isPublic(rt) {
		return req, nil
	}
	changed := g.auth.changes()
	c, err := g.auth.authorize(req, isRead(rt))
	if errors.Is(err, errUnauthenticated) {
		// Refused unread, and the connection with it (limitBodies).
		w.Header().Set("Connection", "close")
		cutBody(req)
		addr, now := hostPart(req.RemoteAddr), time.Now()
		if wait := g.backoff.wait(addr, now); wait > 0 {
			return req, rateLimited(w, wait)
		}
		g.backoff.failed(addr, now)
		w.Header().Set("WWW-Authenticate", `Bearer realm="skein"`)
		return req, err
	}
	if err != nil {
		return req, err
	}
	c.changed = changed
	return req.WithContext(context.WithValue(req.Context(), callerKey{}, c)), nil
}

// authorize returns who r acts for, and in which namespace. It is unauthenticated unless r
// carries exactly one Authorization header, "Bearer <token>", with a token
// of the set; forbidden when the token's role may not use the route (read
// is false: the route writes) or when it names, in HeaderNamespace, a
// namespace the token does not hold.
func (a *authenticator) authorize(r *http.Request, read bool) (caller, error) {
	values := r.Header.Values("Authorization")
	if len(values) != 1 {
		return caller{}, errUnauthenticated
	}
	scheme, token, ok := strings.Cut(values[0], " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return caller{}, errUnauthenticated
	}
	h := sha256.Sum256([]byte(token))
	p := a.tokens().lookupHash(h)
	if p == nil {
		return caller{}, errUnauthenticated
	}
	if !read && p.role == RoleRead {
		return caller{}, events.Errorf(events.CodeForbidden, "the role %s may only read", p.role)
	}
	picked := r.Header.Values(HeaderNamespace)
	switch len(picked) {
	case 0:
		return caller{principal: p.name, ns: p.namespaces[0], token: h}, nil
	case 1:
	default:
		return caller{}, events.Errorf(events.CodeInvalidRequest, "%s given %d times", HeaderNamespace, len(picked))
	}
	ns := events.Namespace(picked[0])
	if !ns.Valid() {
		return caller{}, events.Errorf(events.CodeInvalidNamespace, "namespace must match [a-z0-9][a-z0-9_-]{0,62}")
	}
	if !slices.Contains(p.namespaces, ns) {
		return caller{}, events.Errorf(events.CodeForbidden, "namespace %s is not one of the token's", ns)
	}
	return caller{principal: p.name, ns: ns, token: h}, nil
}
