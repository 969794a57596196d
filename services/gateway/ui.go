package gateway

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"
)

// The web console: static files embedded in the binary (ui/), served at
// /ui/ with / redirecting there. Nothing is built to serve them: the page is
// plain ES modules and the vendored libraries' published module files
// (ui/vendor/README.md). The files are public, like the binary that holds
// them; everything the page shows it reads from the API with the bearer
// token its user types in, so serving them needs no authentication.

//go:embed ui
var uiFiles embed.FS

// uiHeaders are set on every console file. The console shows agent output,
// which is untrusted: the policy allows scripts, styles, images and
// connections from the gateway's own origin only, so that no inline script,
// inline style, eval, foreign image (a beacon in a Markdown image) or frame
// of the page on another site can run, whatever reached the page.
var uiHeaders = map[string]string{
	"Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
		"connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
	"X-Content-Type-Options": "nosniff",
	"Referrer-Policy":        "no-referrer",
	"X-Frame-Options":        "DENY",
	// Revalidated each time (the ETag makes that cheap), so that a new
	// binary's console is never mixed with an old one's modules.
	"Cache-Control":                "no-cache",
	"Cross-Origin-Opener-Policy":   "same-origin",
	"Cross-Origin-Resource-Policy": "same-origin",
}

// mountUI adds the console's routes to mux: one exact route per embedded
// file, so that a path under /ui/ naming no file gets the mux's own answer
// for an unknown route, like any other.
func mountUI(mux *http.ServeMux) {
	err := fs.WalkDir(uiFiles, "ui", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := uiFiles.ReadFile(name)
		if err != nil {
			return err
		}
		pattern := "GET /" + name
		if name == "ui/index.html" {
			pattern = "GET /ui/{$}"
		}
		mux.Handle(pattern, uiFile(name, body))
		return nil
	})
	if err != nil {
		// The files are compiled in: a walk of them cannot fail.
		panic("gateway: the embedded console: " + err.Error())
	}
	mux.HandleFunc("GET /{$}", redirectToUI)
	mux.HandleFunc("GET /ui", redirectToUI)
}

// redirectToUI sends a browser from the bare address to the console.
func redirectToUI(w http.ResponseWriter, r *http.Request) {
	http.Redirect(w, r, "/ui/", http.StatusFound)
}

// uiFile serves one embedded file with the console's headers and an ETag
// of its content.
func uiFile(name string, body []byte) http.Handler {
	sum := sha256.Sum256(body)
	etag := `"` + hex.EncodeToString(sum[:16]) + `"`
	ctype := uiContentType(name)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		for k, v := range uiHeaders {
			h.Set(k, v)
		}
		h.Set("Content-Type", ctype)
		h.Set("ETag", etag)
		// ServeContent answers HEAD, ranges and If-None-Match; the zero
		// time leaves Last-Modified out (embedded files have none).
		http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(body))
	})
}

// uiContentType names a console file's type by its extension. JavaScript
// is named here rather than by the system's MIME table: a module script
// served under any other type is refused by the browser (nosniff).
func uiContentType(name string) string {
	switch ext := path.Ext(name); ext {
	case ".js":
		return "text/javascript; charset=utf-8"
	case ".html":
		return "text/html; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	case ".png":
		return "image/png"
	case ".svg":
		return "image/svg+xml"
	default:
		if strings.HasPrefix(path.Base(name), "LICENSE") || ext == ".md" {
			return "text/plain; charset=utf-8"
		}
		if t := mime.TypeByExtension(ext); t != "" {
			return t
		}
		return "application/octet-stream"
	}
}
