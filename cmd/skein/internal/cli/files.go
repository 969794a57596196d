package cli

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"skein.dev/pkg/events"
)

// The file commands: upload to a session's working directory, list it,
// download from it (the gateway's /v1/sessions/{id}/files routes).

// cancelUploadTimeout bounds the cancel of a failed upload, sent after
// the command's own context may have ended (Ctrl-C).
const cancelUploadTimeout = 5 * time.Second

func (a *app) uploadCommand() *cobra.Command {
	var c common
	var name string
	cmd := &cobra.Command{
		Use:   "upload FILE",
		Short: "Upload a file to a session's working directory",
		Long: `Upload FILE to .skein-attachments/ in the session's working directory, in
chunks, and print where it landed. It keeps its name (or --name), or, when
that is taken, a numbered variant of it: an upload never replaces a file. A
prompt references it with a content block
{"type":"resource_link","uri":"skein-attachment:NAME","name":"NAME"},
which the agent receives as the file (embedded when small and the agent
takes embedded context, else a file:// link). A file is at most 20 MiB
unless the runner allows more.`,
		Args:         cobra.ExactArgs(1),
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := os.Open(args[0])
			if err != nil {
				return err
			}
			defer f.Close()
			st, err := f.Stat()
			if err != nil {
				return err
			}
			if name == "" {
				name = filepath.Base(args[0])
			}
			cl, done := a.client(&c)
			defer done()
			info, err := cl.upload(cmd.Context(), c.session, name, st.Size(), f)
			if err != nil {
				return fmt.Errorf("upload %s: %w", args[0], err)
			}
			_, err = fmt.Fprintf(a.stdout, "uploaded %s (%d bytes); a prompt names it %s%s\n", Visible(info.Path), info.Size, events.AttachmentScheme, Visible(info.Name))
			return err
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "name to upload as (default: FILE's base name)")
	c.register(cmd)
	return cmd
}

func (a *app) filesCommand() *cobra.Command {
	var c common
	cmd := &cobra.Command{
		Use:   "files [DIR]",
		Short: "List a directory of a session's working directory",
		Long: `List DIR, relative to the session's working directory (default: the
directory itself): one line per entry, its size and name, a directory's
name ending in /. Symbolic links are not shown, and paths with .. or
through a link are refused. Never starts the session's agent.`,
		Args:         cobra.MaximumNArgs(1),
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := ""
			if len(args) == 1 {
				dir = args[0]
			}
			cl, done := a.client(&c)
			defer done()
			var list struct {
				Files     []events.FileInfo `json:"files"`
				Truncated bool              `json:"truncated"`
			}
			if err := cl.do(cmd.Context(), http.MethodGet, cl.sessionPath(c.session, "/files?path="+url.QueryEscape(dir)), nil, &list); err != nil {
				return fmt.Errorf("files %s: %w", c.session, err)
			}
			for _, f := range list.Files {
				// The agent names its files as it likes.
				size, name := strconv.FormatInt(f.Size, 10), Visible(f.Name)
				if f.Directory {
					size, name = "-", name+"/"
				}
				if _, err := fmt.Fprintf(a.stdout, "%12s  %s\n", size, name); err != nil {
					return err
				}
			}
			if list.Truncated {
				_, err := fmt.Fprintf(a.stdout, "%12s  (more not shown)\n", "…")
				return err
			}
			return nil
		},
	}
	c.register(cmd)
	return cmd
}

func (a *app) downloadCommand() *cobra.Command {
	var c common
	var out string
	cmd := &cobra.Command{
		Use:   "download PATH",
		Short: "Download a file from a session's working directory",
		Long: `Write the file PATH, relative to the session's working directory, to
standard output, or to the file --output names (which must not exist).
Standard output gets the file's bytes as they are, but when it is a
terminal: there a file with a NUL byte in its first 4 KiB is refused as
binary (as curl does), and any other is shown with its control characters
in caret notation (ESC as ^[), inert, so that the file cannot drive the
terminal. --output - writes the bytes as they are, even to a terminal.`,
		Args:         cobra.ExactArgs(1),
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			var w io.Writer = a.stdout
			var term *terminalFile
			switch {
			case out == "-":
			case out != "":
				f, err := os.OpenFile(out, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
				if err != nil {
					return err
				}
				defer f.Close()
				w = f
			case a.stdoutIsTTY():
				term = &terminalFile{w: &visibleWriter{w: a.stdout}}
				w = term
			}
			cl, done := a.client(&c)
			defer done()
			err := cl.download(cmd.Context(), c.session, args[0], w)
			if err == nil && term != nil {
				err = term.Close()
			}
			if err != nil {
				if out != "" && out != "-" {
					_ = os.Remove(out)
				}
				return fmt.Errorf("download %s: %w", args[0], err)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "file to write (default: standard output; - for standard output as it is, even a terminal)")
	c.register(cmd)
	return cmd
}

// upload sends size bytes of r in the chunks the gateway offers, and
// commits them. An upload that fails or is interrupted after its begin is
// cancelled, so that its bytes do not wait out the runner's hour.
func (c *client) upload(ctx context.Context, sid, name string, size int64, r io.Reader) (info *events.FileInfo, err error) {
	var begun struct {
		TransferID string `json:"transferId"`
		ChunkSize  int64  `json:"chunkSize"`
	}
	if err := c.do(ctx, http.MethodPost, c.sessionPath(sid, "/files/uploads"), map[string]any{"name": name, "size": size}, &begun); err != nil {
		return nil, err
	}
	if begun.ChunkSize <= 0 {
		return nil, fmt.Errorf("the gateway offered chunks of %d bytes", begun.ChunkSize)
	}
	u := c.sessionPath(sid, "/files/uploads/"+url.PathEscape(begun.TransferID))
	defer func() {
		if err != nil {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cancelUploadTimeout)
			defer cancel()
			_ = c.do(cctx, http.MethodDelete, u, nil, nil) // best effort: the runner's TTL is the backstop
		}
	}()
	buf := make([]byte, min(begun.ChunkSize, max(size, 1)))
	for off := int64(0); off < size; {
		n, err := io.ReadFull(r, buf[:min(int64(len(buf)), size-off)])
		if err != nil {
			return nil, fmt.Errorf("read at %d of %d bytes: %w", off, size, err)
		}
		var w struct {
			Offset int64 `json:"offset"`
		}
		if err := c.do(ctx, http.MethodPut, u, map[string]any{"offset": off, "data": base64.StdEncoding.EncodeToString(buf[:n])}, &w); err != nil {
			return nil, err
		}
		off = w.Offset
	}
	var done struct {
		File events.FileInfo `json:"file"`
	}
	if err := c.do(ctx, http.MethodPost, u+"/commit", struct{}{}, &done); err != nil {
		return nil, err
	}
	return &done.File, nil
}

// download copies the file p to w; a body shorter than its length is an
// error.
func (c *client) download(ctx context.Context, sid, p string, w io.Writer) error {
	u := c.sessionPath(sid, "/files/content?path="+url.QueryEscape(p))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	c.authorize(req)
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return c.responseError(resp)
	}
	n, err := io.Copy(w, resp.Body)
	if err == nil && resp.ContentLength >= 0 && n != resp.ContentLength {
		err = fmt.Errorf("got %d of %d bytes", n, resp.ContentLength)
	}
	return err
}

// promptContent is a prompt's content: text, then a skein-attachment:
// resource_link for each upload named, which Skein sends the agent as the
// file.
func promptContent(text string, attach []string) []map[string]string {
	blocks := []map[string]string{{"type": "text", "text": text}}
	for _, name := range attach {
		blocks = append(blocks, map[string]string{"type": "resource_link", "uri": events.AttachmentScheme + name, "name": name})
	}
	return blocks
}

// stdoutIsTTY reports whether standard output is a terminal.
func (a *app) stdoutIsTTY() bool {
	f, ok := a.stdout.(interface{ Fd() uintptr })
	return ok && isTTY(f.Fd())
}

// binarySniff is how much of a file's start download looks at on a
// terminal for a NUL byte, the mark of a binary file (curl looks at its
// first buffer).
const binarySniff = 4 << 10

// errBinaryToTerminal refuses a binary file on a terminal, as curl does.
var errBinaryToTerminal = errors.New("binary output can mess up your terminal: use --output FILE, or --output - to write it here anyway")

// terminalFile is a download's way to a terminal: the file's first
// binarySniff bytes are held until they are known to hold no NUL byte,
// then everything goes on to w (a visibleWriter).
type terminalFile struct {
	w     *visibleWriter
	start []byte
	text  bool // the start was looked at: no NUL
}

func (t *terminalFile) Write(p []byte) (int, error) {
	if t.text {
		return t.w.Write(p)
	}
	t.start = append(t.start, p...)
	if bytes.IndexByte(t.start, 0) >= 0 {
		return 0, errBinaryToTerminal
	}
	if len(t.start) < binarySniff {
		return len(p), nil
	}
	return len(p), t.flush()
}

// Close writes what is held: a file shorter than binarySniff.
func (t *terminalFile) Close() error {
	if !t.text {
		if err := t.flush(); err != nil {
			return err
		}
	}
	return t.w.Close()
}

// flush ends the look at the start and writes it on.
func (t *terminalFile) flush() error {
	t.text = true
	_, err := t.w.Write(t.start)
	t.start = nil
	return err
}
