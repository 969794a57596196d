package adapterrunner_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/internal/natstest"
	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	adapterrunner "skein.dev/services/adapter-runner"
	"skein.dev/testagent"
)

// A small window, so that a flood fills it at once: 8 records or 32 KiB.
const (
	testWindowRecords = 8
	testWindowBytes   = 32 << 10
)

// floodChunks is more output than a full window, the gathered burst,
// acpwire's read buffer and the pipe together can hold (4 MB against a few
// hundred KB): an agent that writes it all was not held back.
const floodChunks = 20000

// refuseIO edits ACP_IO to capture other subjects, so that a publish to a
// session's ACP_IO subject finds no responders, as while a stream has no
// leader. It returns what puts the stream back.
func refuseIO(t *testing.T, js jetstream.JetStream) (restore func()) {
	t.Helper()
	s, err := js.Stream(t.Context(), events.StreamIO)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	away := cfg
	away.Subjects, away.RePublish = []string{"acp.elsewhere.>"}, nil
	if _, err := js.UpdateStream(t.Context(), away); err != nil {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		if _, err := js.UpdateStream(t.Context(), cfg); err != nil {
			t.Fatal(err)
		}
	}
}

// storedRecord is a record ACP_IO stored.
type storedRecord struct {
	process string
	no      uint64
	v       events.Variant
}

// readIO returns the records ACP_IO holds for session sid, in stream
// order.
func readIO(ctx context.Context, js jetstream.JetStream, sid string) ([]storedRecord, error) {
	s, err := js.Stream(ctx, events.StreamIO)
	if err != nil {
		return nil, err
	}
	var out []storedRecord
	subject := events.IOSessionSubjects("default", events.SessionID(sid))
	for seq := uint64(1); ; {
		m, err := s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		v, err := events.Unmarshal(m.Data)
		if err != nil {
			return nil, fmt.Errorf("record at %d: %w", m.Sequence, err)
		}
		no, err := strconv.ParseUint(m.Header.Get(events.HeaderRecordNo), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("record at %d: %s: %w", m.Sequence, events.HeaderRecordNo, err)
		}
		out = append(out, storedRecord{process: m.Header.Get(events.HeaderProcessID), no: no, v: v})
		seq = m.Sequence + 1
	}
}

// awaitStored polls ACP_IO until it holds, for process p1 of session sid,
// a record of type T and every record number from 1 to the highest, and
// returns p1's records, in stream order.
func awaitStored[T events.Variant](t *testing.T, js jetstream.JetStream, sid string, within time.Duration) []storedRecord {
	t.Helper()
	deadline := time.Now().Add(within)
	tick := time.NewTicker(50 * time.Millisecond) // a read of the whole subject per tick
	defer tick.Stop()
	var last error
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		recs, err := readIO(ctx, js, sid)
		cancel()
		if err != nil {
			last = err // a cluster electing a leader answers nothing for a while
		} else if recs = ofProcess(recs, "p1"); complete[T](recs) {
			return recs
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for ACP_IO to hold every record of p1 up to a %T (last error %v); it holds %s",
				within, *new(T), last, numbers(recs))
		}
		select {
		case <-tick.C:
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		}
	}
}

func ofProcess(recs []storedRecord, process string) []storedRecord {
	return slices.DeleteFunc(recs, func(r storedRecord) bool { return r.process != process })
}

// complete reports whether recs hold a T and every number from 1 to their
// highest.
func complete[T events.Variant](recs []storedRecord) bool {
	seen := map[uint64]bool{}
	var top uint64
	found := false
	for _, r := range recs {
		seen[r.no] = true
		top = max(top, r.no)
		if _, ok := r.v.(T); ok {
			found = true
		}
	}
	return found && len(seen) == int(top)
}

// numbers describes the record numbers of recs, for a failure message.
func numbers(recs []storedRecord) string {
	var b strings.Builder
	for i, r := range recs {
		if i == 20 {
			fmt.Fprintf(&b, " ... (%d records)", len(recs))
			break
		}
		fmt.Fprintf(&b, " %d", r.no)
	}
	return "[" + b.String() + " ]"
}

// checkOnce fails t unless recs are numbered 1, 2, ... each once, and
// returns their updates in record-number order.
func checkOnce(t *testing.T, recs []storedRecord) []events.JSON {
	t.Helper()
	byNo := map[uint64]events.Variant{}
	for _, r := range recs {
		if _, dup := byNo[r.no]; dup {
			t.Errorf("record %d of p1 stored twice", r.no)
		}
		byNo[r.no] = r.v
	}
	var updates []events.JSON
	for no := uint64(1); no <= uint64(len(byNo)); no++ {
		v, ok := byNo[no]
		if !ok {
			t.Fatalf("record %d of p1 not stored; ACP_IO holds %s", no, numbers(recs))
		}
		updates = append(updates, events.UpdatesOf(v)...)
	}
	return updates
}

// While ACP_IO cannot store, the runner keeps what the adapter said in its
// window and sends it again: the window stays within its bounds, the
// runner stops reading the adapter, and the adapter, blocked on its pipe,
// cannot get through its script. Once the stream stores again, every record
// is stored exactly once, numbered without a gap, and the turn completes.
func TestRecordsWaitWhileTheStreamRefuses(t *testing.T) {
	ctl := t.TempDir()
	h := startWith(t, adapterrunner.Config{IOWindowRecords: testWindowRecords, IOWindowBytes: testWindowBytes},
		adapterrunner.Agent{ID: "test", Command: testAgent, Args: []string{"--control-dir", ctl, "--log-level", "warn"}})
	h.create(t, "s1", "p1", "test")
	js, err := jetstream.New(h.nc)
	if err != nil {
		t.Fatal(err)
	}
	gauge := func(name string) float64 { return testutil.Metric(t, h.reg, name) }
	before := gauge("acp_runner_io_records_total")
	restore := refuseIO(t, js)
	h.prompt(t, "s1", "p1", "t1", fmt.Sprintf("chunks %d\npause flooded\nstop end_turn", floodChunks))

	testutil.Eventually(t, "the runner to wait for room in the window", func() bool { return gauge("acp_runner_io_window_waits_total") > 0 })
	testutil.Eventually(t, "a record sent again", func() bool { return gauge("acp_runner_io_retries_total") > 0 })
	// Nothing is stored while the stream refuses: what the runner handed
	// to NATS is all still in flight, within the window.
	if n := gauge("acp_runner_io_records_total") - before; n != 0 {
		t.Errorf("%v records stored while ACP_IO captured other subjects", n)
	}
	records, bytes := gauge("acp_runner_io_in_flight_records"), gauge("acp_runner_io_in_flight_bytes")
	if records < 1 || records > testWindowRecords {
		t.Errorf("%v records in flight with a full window, want 1 to %d", records, testWindowRecords)
	}
	if records > 1 && bytes > testWindowBytes {
		t.Errorf("%v records of %v bytes in flight, want at most %d bytes (one record alone may be larger)", records, bytes, testWindowBytes)
	}
	if _, err := os.Stat(testagent.PausedFile(ctl, "flooded")); err == nil {
		t.Errorf("the agent wrote all %d chunks though the runner stopped reading at a full window", floodChunks)
	}

	restore()
	if err := testagent.WaitPaused(t.Context(), ctl, "flooded"); err != nil {
		t.Fatal(err)
	}
	if err := testagent.Release(t.Context(), ctl, "flooded"); err != nil {
		t.Fatal(err)
	}
	recs := awaitStored[*events.AdapterPromptResult](t, js, "s1", waitFor)
	if got := len(checkOnce(t, recs)); got != floodChunks {
		t.Errorf("%d updates stored, want the %d the agent wrote", got, floodChunks)
	}
	if errs := gauge("acp_runner_io_publish_errors_total"); errs != 0 {
		t.Errorf("%v records given up on", errs)
	}
}

// An adapter that exits while its window is full, the stream refusing, is
// reported once everything it wrote is stored: the exit comes last, no
// record lost.
func TestExitIsStoredAfterAFullWindow(t *testing.T) {
	h := startWith(t, adapterrunner.Config{IOWindowRecords: testWindowRecords, IOWindowBytes: testWindowBytes})
	h.create(t, "s1", "p1", "test")
	js, err := jetstream.New(h.nc)
	if err != nil {
		t.Fatal(err)
	}
	restore := refuseIO(t, js)
	h.prompt(t, "s1", "p1", "t1", fmt.Sprintf("chunks %d\ncrash 3", floodChunks))
	testutil.Eventually(t, "the runner to wait for room in the window", func() bool {
		return testutil.Metric(t, h.reg, "acp_runner_io_window_waits_total") > 0
	})
	restore()
	recs := awaitStored[*events.AcpAgentExitedEvent](t, js, "s1", waitFor)
	if got := len(checkOnce(t, recs)); got != floodChunks {
		t.Errorf("%d updates stored, want the %d the agent wrote", got, floodChunks)
	}
	last := slices.MaxFunc(recs, func(a, b storedRecord) int { return int(a.no) - int(b.no) })
	if _, ok := last.v.(*events.AcpAgentExitedEvent); !ok {
		t.Errorf("the last record is a %s, want the exit", last.v.VariantName())
	}
}

// Run returns while an adapter's window is full and the stream refuses:
// stopping the adapter ends the window's wait and its retries, and nothing
// of the runner's is left running.
func TestRunReturnsWhileTheWindowIsFull(t *testing.T) {
	h := startWith(t, adapterrunner.Config{IOWindowRecords: testWindowRecords, IOWindowBytes: testWindowBytes})
	h.create(t, "s1", "p1", "test")
	js, err := jetstream.New(h.nc)
	if err != nil {
		t.Fatal(err)
	}
	refuseIO(t, js)
	h.prompt(t, "s1", "p1", "t1", fmt.Sprintf("chunks %d\nstop end_turn", floodChunks))
	testutil.Eventually(t, "the runner to wait for room in the window", func() bool {
		return testutil.Metric(t, h.reg, "acp_runner_io_window_waits_total") > 0
	})
	if err := h.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n := testutil.Metric(t, h.reg, "acp_runner_io_in_flight_records"); n != 0 {
		t.Errorf("%v records still in flight after Run returned", n)
	}
	var left []string
	if err := testutil.Poll(t.Context(), "the runner's goroutines to end", func() (bool, error) { left = runnerGoroutines(); return len(left) == 0, nil }); err != nil {
		t.Errorf("%v: goroutines left after Run returned:\n%s", err, strings.Join(left, "\n\n"))
	}
}

// Losing the ACP_IO stream's leader mid-flood on a 3-node cluster loses no
// record and stores none twice: what the runner sent to the dying leader,
// or sent while the others elected a new one, is sent again until stored,
// and the adapter waits meanwhile on its full window.
func TestRecordsSurviveTheLossOfTheStreamLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster and waits for a stream leader's election")
	}
	nodes := natstest.RunCluster(t, 3)
	nc := natstest.ConnectURL(t, natstest.ClusterURL(nodes))
	ctl := t.TempDir()
	h := startOn(t, nc, adapterrunner.Config{Replicas: 3},
		adapterrunner.Agent{ID: "test", Command: testAgent, Args: []string{"--control-dir", ctl, "--log-level", "warn"}})
	h.create(t, "s1", "p1", "test")
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	const chunks = 3000
	h.prompt(t, "s1", "p1", "t1", fmt.Sprintf("stream %d 1000 64\npause streamed\nstop end_turn", chunks))
	testutil.Eventually(t, "ACP_IO to store the first records", func() bool {
		return testutil.Metric(t, h.reg, "acp_runner_io_records_total") >= 3
	})
	s, err := js.Stream(t.Context(), events.StreamIO)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context())
	if err != nil || info.Cluster == nil || info.Cluster.Leader == "" {
		t.Fatalf("ACP_IO's leader: %+v, %v", info, err)
	}
	killed := false
	for _, n := range nodes {
		if n.Name() == info.Cluster.Leader {
			n.Shutdown()
			n.WaitForShutdown()
			killed = true
		}
	}
	if !killed {
		t.Fatalf("no node is named %q", info.Cluster.Leader)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if err := testagent.WaitPaused(ctx, ctl, "streamed"); err != nil {
		t.Fatalf("the agent did not get through its stream: %v", err)
	}
	if err := testagent.Release(ctx, ctl, "streamed"); err != nil {
		t.Fatal(err)
	}
	recs := awaitStored[*events.AdapterPromptResult](t, js, "s1", 2*time.Minute)
	if got := len(checkOnce(t, recs)); got != chunks {
		t.Errorf("%d updates stored, want the %d the agent wrote", got, chunks)
	}
	if errs := testutil.Metric(t, h.reg, "acp_runner_io_publish_errors_total"); errs != 0 {
		t.Errorf("%v records given up on", errs)
	}
	t.Logf("records sent again: %v", testutil.Metric(t, h.reg, "acp_runner_io_retries_total"))
}
