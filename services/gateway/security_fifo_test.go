package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"skein.dev/internal/testutil"
)

// The agent makes a FIFO in its workspace, and a read-only token
// downloads it, again and again, through the gateway: each download is
// refused at once (400, or 429 past the session's file ops in flight),
// never a 504 after a wait, and the process (gateway, session service
// and runner together, as under skein dev) holds no more descriptors or
// goroutines after them than before.
func TestSecurityFIFODownloadOverHTTP(t *testing.T) {
	e := newEnv(t, withConfig(withTokens))
	dir := e.backend.WorkDir("fifo")
	if r := e.send(http.MethodPut, "/v1/sessions/f1", fmt.Sprintf(`{"agent":"demo","cwd":%q}`, dir), bearer(userToken)); r.status != http.StatusOK {
		t.Fatalf("open = %d %s", r.status, r.body)
	}
	trap := filepath.Join(dir, "trap")
	if err := syscall.Mkfifo(trap, 0o600); err != nil {
		t.Fatal(err)
	}
	// Whatever still waits in an open of the FIFO (before the fix) is let
	// go at the end, so that the services can stop.
	t.Cleanup(func() {
		if fd, err := syscall.Open(trap, syscall.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			syscall.Close(fd)
		}
	})
	download := func(ctx context.Context) int {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.url+"/v1/sessions/f1/files/content?path=trap", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+readToken)
		resp, err := e.client.Do(req)
		if err != nil {
			return 0 // no answer in time
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	download(t.Context()) // the first makes what every later one shares
	fdsOf := func() int {
		entries, _ := os.ReadDir("/proc/self/fd")
		return len(entries)
	}
	fds, goroutines := fdsOf(), runtime.NumGoroutine()

	const n, workers = 400, 20
	var mu sync.Mutex
	got := map[int]int{}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range n / workers {
				ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
				status := download(ctx)
				cancel()
				mu.Lock()
				got[status]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	t.Logf("%d downloads of a FIFO: %v (status: count; 0 no answer in 3s)", n, got)
	if got[http.StatusBadRequest]+got[http.StatusTooManyRequests] != n || got[http.StatusBadRequest] == 0 {
		t.Errorf("%d downloads of a FIFO answered %v, want each 400 or 429", n, got)
	}
	e.client.CloseIdleConnections()
	var nowFDs, nowG int
	if err := testutil.PollWithin(t.Context(), 15*time.Second, "the process to hold what it held before", func() (bool, error) {
		nowFDs, nowG = fdsOf(), runtime.NumGoroutine()
		return nowFDs <= fds && nowG <= goroutines, nil
	}); err != nil {
		t.Errorf("after the downloads: %d descriptors (were %d), %d goroutines (were %d)", nowFDs, fds, nowG, goroutines)
	}
}
