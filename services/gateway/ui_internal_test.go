package gateway

import (
	"io/fs"
	"net/http"
	"net/http/httptest"
	"path"
	"regexp"
	"strings"
	"testing"
)

func uiMux() *http.ServeMux {
	mux := http.NewServeMux()
	mountUI(mux)
	return mux
}

func uiGet(t *testing.T, h http.Handler, target string, hdr ...string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, target, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// TestUIServesConsole checks the console's routes and headers: / and /ui
// redirect to /ui/, which is the page, served with the strict policy; a
// module is JavaScript by type; an unchanged file is not sent again; a
// path naming no file is left to the mux.
func TestUIServesConsole(t *testing.T) {
	mux := uiMux()
	for _, p := range []string{"/", "/ui"} {
		rec := uiGet(t, mux, p)
		if rec.Code != http.StatusFound || rec.Header().Get("Location") != "/ui/" {
			t.Errorf("GET %s = %d to %q, want 302 to /ui/", p, rec.Code, rec.Header().Get("Location"))
		}
	}
	rec := uiGet(t, mux, "/ui/")
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `<script type="module" src="app.js">`) {
		t.Fatalf("GET /ui/ = %d %q, want the page", rec.Code, rec.Body.String())
	}
	h := rec.Header()
	csp := h.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'self'", "script-src 'self';", "style-src 'self';", "connect-src 'self'", "frame-ancestors 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("Content-Security-Policy %q lacks %q", csp, want)
		}
	}
	for _, weak := range []string{"unsafe-inline", "unsafe-eval", "*"} {
		if strings.Contains(csp, weak) {
			t.Errorf("Content-Security-Policy %q allows %q", csp, weak)
		}
	}
	if got := h.Get("X-Content-Type-Options"); got != "nosniff" {
		t.Errorf("X-Content-Type-Options = %q, want nosniff", got)
	}
	if got := h.Get("Referrer-Policy"); got != "no-referrer" {
		t.Errorf("Referrer-Policy = %q, want no-referrer", got)
	}
	if got := h.Get("Content-Type"); got != "text/html; charset=utf-8" {
		t.Errorf("page Content-Type = %q", got)
	}

	rec = uiGet(t, mux, "/ui/app.js")
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "text/javascript; charset=utf-8" {
		t.Errorf("GET /ui/app.js = %d %q, want 200 text/javascript", rec.Code, rec.Header().Get("Content-Type"))
	}
	if rec.Header().Get("Content-Security-Policy") == "" {
		t.Error("a module is served without the policy")
	}
	etag := rec.Header().Get("ETag")
	if again := uiGet(t, mux, "/ui/app.js", "If-None-Match", etag); etag == "" || again.Code != http.StatusNotModified {
		t.Errorf("GET /ui/app.js with its ETag %q = %d, want 304", etag, again.Code)
	}

	for _, p := range []string{"/ui/nope.js", "/ui/vendor/", "/ui/../gateway.go"} {
		if rec := uiGet(t, mux, p); rec.Code == http.StatusOK {
			t.Errorf("GET %s = 200, want no file", p)
		}
	}
}

var (
	importRE      = regexp.MustCompile(`(?:import|export)\s*(?:[\w*{}\s,$]*?\s*from\s*)?["']([^"']+)["']`)
	inlineRE      = regexp.MustCompile(`(?i)<script(?:\s[^>]*)?>\s*[^<\s]|<style|\sstyle=|\son[a-z]+=`)
	htmlRefsRE    = regexp.MustCompile(`(?:src|href)="([^"]+)"`)
	innerHTMLRE   = regexp.MustCompile(`innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(|new Function`)
	dangerousSets = regexp.MustCompile(`dangerouslySetInnerHTML`)
)

// TestUIFilesResolve checks the embedded files as a browser under the
// policy would load them: every module a module imports, and every file
// the page names, is served, by a relative path (a bare name would need an
// import map, an inline script); the page has no inline script, style or
// handler; and only render.js's sanitized Markdown, through the one
// component that shows it, reaches innerHTML.
func TestUIFilesResolve(t *testing.T) {
	mux := uiMux()
	page, err := fs.ReadFile(uiFiles, "ui/index.html")
	if err != nil {
		t.Fatal(err)
	}
	if m := inlineRE.Find(page); m != nil {
		t.Errorf("index.html has inline code or style: %q", m)
	}
	for _, m := range htmlRefsRE.FindAllSubmatch(page, -1) {
		if strings.Contains(string(m[1]), ":") {
			continue // a data: URL
		}
		if rec := uiGet(t, mux, path.Join("/ui", string(m[1]))); rec.Code != http.StatusOK {
			t.Errorf("index.html names %s: GET = %d", m[1], rec.Code)
		}
	}
	modules := 0
	err = fs.WalkDir(uiFiles, "ui", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || path.Ext(name) != ".js" {
			return err
		}
		modules++
		src, err := fs.ReadFile(uiFiles, name)
		if err != nil {
			return err
		}
		for _, m := range importRE.FindAllSubmatch(src, -1) {
			spec := string(m[1])
			if !strings.HasPrefix(spec, "./") && !strings.HasPrefix(spec, "../") {
				t.Errorf("%s imports %q: not a relative path", name, spec)
				continue
			}
			target := path.Join(path.Dir("/"+name), spec)
			if rec := uiGet(t, mux, target); rec.Code != http.StatusOK {
				t.Errorf("%s imports %s: GET %s = %d", name, spec, target, rec.Code)
			}
		}
		if strings.HasPrefix(name, "ui/vendor/") {
			return nil
		}
		if m := innerHTMLRE.Find(src); m != nil {
			t.Errorf("%s uses %s", name, m)
		}
		if n := len(dangerousSets.FindAll(src, -1)); n > 0 && name != "ui/items.js" {
			t.Errorf("%s sets HTML %d times; only items.js's Message may, with render.js's markdown()", name, n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if modules < 8 {
		t.Errorf("found %d modules, want the console's and the vendored ones", modules)
	}
}
