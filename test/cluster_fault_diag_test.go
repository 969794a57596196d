package test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"skein.dev/internal/cluster"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
)

// What a fault test watches and reports: SSE viewers that follow the
// sessions as clients do, and the dumps and NATS state it logs when a
// fault shows.

// sseViewer follows a session's event stream, as a client does: it
// reconnects after any failure with Last-Event-ID, to the other gateway.
type sseViewer struct {
	sid string

	mu         sync.Mutex
	seen       map[uint64]uint64 // durable sequence → eventNo
	last       uint64
	problems   []string
	reported   int
	reconnects int
}

func (v *sseViewer) run(ctx context.Context, r *faultRig, gw int) {
	for ctx.Err() == nil {
		v.follow(ctx, r, gw)
		gw++
		v.mu.Lock()
		v.reconnects++
		v.mu.Unlock()
		wait(ctx, 100*time.Millisecond)
	}
}

// follow reads one connection's events until it ends.
func (v *sseViewer) follow(ctx context.Context, r *faultRig, gw int) {
	v.mu.Lock()
	after := v.last
	v.mu.Unlock()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/v1/sessions/%s/events?after=%d", r.c.HTTP[gw%len(r.c.HTTP)], v.sid, after), nil)
	if err != nil {
		return
	}
	req.Header.Set("Authorization", "Bearer "+r.c.Token)
	resp, err := r.client.Do(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	var event string
	var data []string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if event == "durable" {
				v.durable(strings.Join(data, "\n"))
			}
			event, data = "", nil
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data = append(data, strings.TrimPrefix(line, "data: "))
		}
	}
}

func (v *sseViewer) durable(data string) {
	var e struct {
		Sequence uint64 `json:"sequence"`
		EventNo  uint64 `json:"eventNo"`
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if err := json.Unmarshal([]byte(data), &e); err != nil {
		v.problems = append(v.problems, fmt.Sprintf("durable event %q: %v", data, err))
		return
	}
	if e.Sequence <= v.last {
		v.problems = append(v.problems, fmt.Sprintf("durable event %d after %d", e.Sequence, v.last))
		return
	}
	if prev := v.seen[v.last]; v.last != 0 && e.EventNo != prev+1 {
		v.problems = append(v.problems, fmt.Sprintf("durable event %d is eventNo %d after eventNo %d", e.Sequence, e.EventNo, prev))
	}
	v.seen[e.Sequence] = e.EventNo
	v.last = e.Sequence
}

func (v *sseViewer) snapshot() map[uint64]uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	return maps.Clone(v.seen)
}

func (v *sseViewer) reconnectCount() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.reconnects
}

func (v *sseViewer) newest() uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.last
}

func (v *sseViewer) problemsSince() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	p := v.problems[v.reported:]
	v.reported = len(v.problems)
	return p
}

// dumpSessions makes the session services print their goroutines and
// exit (SIGQUIT), copies their logs and the runner's out of the test's
// directory, says where, and restarts them.
func (r *faultRig) dumpSessions(name string) {
	r.t.Helper()
	r.dumpServices(name, cluster.Session)
	r.t.Errorf("%s: operations in flight (the prompts, or the mixed sessions' rounds) did not all return within 3 minutes; see the services' logs above", name)
}

// logInterest logs, for each running node, the subscriptions it knows of
// that match subject (its clients' and its routes'), from /subsz: where a
// stalled viewer's gateway lost the stream's republish, it shows which
// node has no interest.
func (r *faultRig) logInterest(subject string) {
	r.t.Helper()
	for i, n := range r.c.Nodes {
		if !n.Running() {
			continue
		}
		var subsz struct {
			Subs []struct {
				Subject string `json:"subject"`
				CID     uint64 `json:"cid"`
				Account string `json:"account"`
			} `json:"subscriptions_list"`
		}
		if err := r.monitor(i, "subsz?subs=1&acc=SKEIN&limit=1024&test="+subject, &subsz); err != nil {
			r.t.Logf("interest in %s on %s: %v", subject, n.Name, err)
			continue
		}
		r.t.Logf("interest in %s on %s: %+v", subject, n.Name, subsz.Subs)
		var connz struct {
			Conns []struct {
				CID  uint64   `json:"cid"`
				User string   `json:"authorized_user"`
				Subs []string `json:"subscriptions_list"`
			} `json:"connections"`
		}
		if err := r.monitor(i, "connz?auth=true&subs=1&limit=1024", &connz); err == nil {
			for _, c := range connz.Conns {
				if strings.HasPrefix(c.User, "skein-gateway") {
					r.t.Logf("%s: gateway connection cid %d has %d subscriptions, %s among them: %v", n.Name, c.CID, len(c.Subs), subject, slices.ContainsFunc(c.Subs, covers(subject)))
				}
			}
		}
		var routez struct {
			Routes []struct {
				RID    uint64   `json:"rid"`
				Remote string   `json:"remote_name"`
				Subs   []string `json:"subscriptions_list"`
			} `json:"routes"`
		}
		if err := r.monitor(i, "routez?subs=1", &routez); err == nil {
			for _, rt := range routez.Routes {
				r.t.Logf("%s: route %d to %s: %d subscriptions, %s among them: %v", n.Name, rt.RID, rt.Remote, len(rt.Subs), subject, slices.ContainsFunc(rt.Subs, covers(subject)))
			}
		}
	}
}

// monitor reads path (with its query) from node i's monitoring endpoint
// and decodes the JSON it answers into v.
func (r *faultRig) monitor(i int, path string, v any) error {
	resp, err := r.client.Get(fmt.Sprintf("http://127.0.0.1:%d/%s", r.c.MonitorPorts[i], path))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}

// covers returns whether a subscription's subject (a route's subjects
// start with the account's name) covers subject: the same, or a ">"
// filter above it.
func covers(subject string) func(sub string) bool {
	return func(sub string) bool {
		sub = sub[strings.LastIndex(sub, " ")+1:]
		return sub == subject || strings.HasSuffix(sub, ".>") && strings.HasPrefix(subject, strings.TrimSuffix(sub, ">"))
	}
}

// dumpServices makes the services of target print their goroutines and
// exit (SIGQUIT), copies every service's log out of the test's directory,
// says where, and restarts them.
func (r *faultRig) dumpServices(name, target string) {
	r.t.Helper()
	dir, err := os.MkdirTemp("", "skein-fault-"+name+"-")
	if err != nil {
		r.t.Fatal(err)
	}
	for _, p := range r.c.Services {
		if strings.HasPrefix(p.Name, target+"-") && p.Pid != 0 {
			_ = syscall.Kill(p.Pid, syscall.SIGQUIT)
			select {
			case <-p.Exited():
			case <-time.After(30 * time.Second):
			}
		}
		if b, err := os.ReadFile(p.Log); err == nil {
			_ = os.WriteFile(filepath.Join(dir, p.Name+".log"), b, 0o600)
		}
	}
	r.t.Logf("%s: the goroutines of %s and every service's log are in %s", name, target, dir)
	for _, p := range r.c.Services {
		if !p.Running() {
			r.restart(p)
		}
	}
}

// ioRecords describes what ACP_IO holds of the session's newest adapter
// process: how many records, and the gaps in their numbers (in stream
// order: a record stored late after a retry shows as one).
func (r *faultRig) ioRecords(sid string) string {
	// Right after a node's death the read may time out: read again.
	deadline := time.Now().Add(30 * time.Second)
	for {
		held, err := r.readIO(sid)
		if err == nil || time.Now().After(deadline) || !wait(r.t.Context(), 100*time.Millisecond) {
			return held
		}
	}
}

func (r *faultRig) readIO(sid string) (string, error) {
	var proc string
	var nos []uint64
	for rec, err := range eventlog.Replay(r.t.Context(), r.js, events.StreamIO, events.IOSessionSubjects(events.DefaultNamespace, events.SessionID(sid)), 0) {
		if err != nil {
			return err.Error(), err
		}
		if p := rec.Header.Get(events.HeaderProcessID); p != proc {
			proc, nos = p, nil
		}
		n, _ := strconv.ParseUint(rec.Header.Get(events.HeaderRecordNo), 10, 64)
		nos = append(nos, n)
	}
	var gaps []string
	for i := 1; i < len(nos); i++ {
		if nos[i] != nos[i-1]+1 {
			gaps = append(gaps, fmt.Sprintf("%d->%d", nos[i-1], nos[i]))
		}
	}
	return fmt.Sprintf("%d records of process %s, gaps %v", len(nos), proc, gaps), nil
}
