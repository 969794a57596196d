package applier

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// run admits the records steps name, in that order, and says after each
// what the applier did: its verdict, then the numbers Next handed back
// (a replayed record marked "~", one replayed in part "~n"), and after a
// held record that must end the wait, "!" and why.
//
// A step is "<no>@<seq>" (a record of process p), "x<no>@<seq>" (p's exit
// record), "q<no>@<seq>" (another process's record), or "skip" (the owner
// gives up the wait: SkipGap, then Next).
func run(t *testing.T, a *Applier[string], buffering bool, steps ...string) []string {
	t.Helper()
	var out []string
	for _, step := range steps {
		var got []string
		if step == "skip" {
			got = append(got, fmt.Sprintf("skip %v", a.SkipGap()))
		} else {
			rec := Record[string]{Process: "p", Value: step, Size: 10}
			spec := step
			switch spec[0] {
			case 'x':
				rec.Exit, spec = true, spec[1:]
			case 'q':
				rec.Process, spec = "q", spec[1:]
			}
			no, seq, ok := strings.Cut(spec, "@")
			if !ok {
				t.Fatalf("bad step %q", step)
			}
			var err error
			if rec.No, err = strconv.ParseUint(no, 10, 64); err != nil {
				t.Fatalf("bad step %q: %v", step, err)
			}
			if rec.Seq, err = strconv.ParseUint(seq, 10, 64); err != nil {
				t.Fatalf("bad step %q: %v", step, err)
			}
			v, giveUp := a.Admit(rec)
			got = append(got, v.String())
			if giveUp != "" {
				got = append(got, "!"+giveUp)
			}
		}
		for {
			ap, ok := a.Next(buffering)
			if !ok {
				break
			}
			n := strconv.FormatUint(ap.No, 10)
			switch {
			case ap.old < 0:
				n += "~"
			case ap.old > 0:
				n += "~" + strconv.Itoa(ap.old)
			}
			got = append(got, n)
		}
		out = append(out, strings.Join(got, " "))
	}
	return out
}

func TestApplierOrders(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps []string
		want  []string
		// after the steps: what is missing, and where a new owner reads from
		missing string
		from    uint64
	}{
		{
			name:  "in order",
			steps: []string{"1@11", "2@12", "3@13"},
			want:  []string{"ready 1", "ready 2", "ready 3"},
			from:  13,
		},
		{
			name:  "a retry stored after the records published next",
			steps: []string{"1@11", "3@12", "4@13", "2@14"},
			want:  []string{"ready 1", "held", "held", "ready 2 3 4"},
			from:  13,
		},
		{
			name:  "repeats: a retry stored twice, a held record stored twice",
			steps: []string{"1@11", "1@12", "3@13", "3@14", "2@15", "2@16", "3@17"},
			want:  []string{"ready 1", "duplicate", "held", "duplicate", "ready 2 3", "duplicate", "duplicate"},
			from:  13,
		},
		{
			name:    "a gap never filled",
			steps:   []string{"1@11", "4@12", "5@13", "7@14"},
			want:    []string{"ready 1", "held", "held", "held"},
			missing: "2-3, 6",
			from:    11,
		},
		{
			name:  "given up: the held ones applied past the gaps",
			steps: []string{"1@11", "4@12", "5@13", "7@14", "skip", "skip", "skip"},
			want:  []string{"ready 1", "held", "held", "held", "skip true 4 5", "skip true 7", "skip false"},
			from:  14,
		},
		{
			name:    "the exit held behind a gap ends the wait",
			steps:   []string{"1@11", "x3@12"},
			want:    []string{"ready 1", "held !the agent exited"},
			missing: "2",
			from:    11,
		},
		{
			name:  "the exit in order is just the last record",
			steps: []string{"1@11", "x2@12"},
			want:  []string{"ready 1", "ready 2"},
			from:  12,
		},
		{
			name:  "another process's records and unnumbered ones are passed over",
			steps: []string{"q1@11", "0@12", "1@13", "q2@14"},
			want:  []string{"foreign", "unnumbered", "ready 1", "foreign"},
			from:  13,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := New[string]("p", 10)
			got := run(t, a, false, tc.steps...)
			if !slices.Equal(got, tc.want) {
				t.Errorf("steps %q\n got %q\nwant %q", tc.steps, got, tc.want)
			}
			if missing, _ := a.Missing(); missing != tc.missing {
				t.Errorf("Missing() = %q, want %q", missing, tc.missing)
			}
			if from := a.ResumeFrom(); from != tc.from {
				t.Errorf("ResumeFrom() = %d, want %d", from, tc.from)
			}
		})
	}
}

// A new owner resumes where the old owner's stamp says, reads again from
// its From, and gets the records the old owner applied back replayed.
func TestApplierResumes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		point string
		steps []string
		want  []string
	}{
		{
			name:  "after a whole record: earlier ones are duplicates",
			point: "13 2",
			steps: []string{"3@13", "4@14"},
			want:  []string{"ready 3", "ready 4"},
		},
		{
			name:  "a record held before the one missing is read again",
			point: "12 2",
			steps: []string{"4@12", "3@13"},
			want:  []string{"held", "ready 3 4"},
		},
		{
			name:  "within a burst: its record comes back in part",
			point: "12 2.3",
			steps: []string{"2@12", "3@13"},
			want:  []string{"ready 2~3", "ready 3"},
		},
		{
			name:  "chunks held in memory: their records come back replayed",
			point: "10 4 2.1",
			steps: []string{"1@10", "2@11", "3@12", "4@13", "5@14"},
			want:  []string{"duplicate", "ready 2~", "ready 3~", "ready 4~", "ready 5"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, ok := ParseResumePoint(tc.point)
			if !ok {
				t.Fatalf("ParseResumePoint(%q) failed", tc.point)
			}
			a := Resume[string]("p", p)
			if got := run(t, a, false, tc.steps...); !slices.Equal(got, tc.want) {
				t.Errorf("from %q, steps %q\n got %q\nwant %q", tc.point, tc.steps, got, tc.want)
			}
		})
	}
}

// Rehold: of what an old owner applied, only the chunks from the first
// one it held in memory are held again.
func TestApplierReholdsTheMessageInProgress(t *testing.T) {
	a := Resume[string]("p", ResumePoint{From: 10, Applied: Pos{No: 2, N: 3}, Held: Pos{No: 1, N: 2}})
	var ap []Applied[string]
	for _, rec := range []Record[string]{{Seq: 10, No: 1, Process: "p"}, {Seq: 11, No: 2, Process: "p"}} {
		if v, _ := a.Admit(rec); v != Ready {
			t.Fatalf("Admit(%+v) = %v, want ready", rec, v)
		}
		next, _ := a.Next(len(ap) > 0)
		ap = append(ap, next)
	}
	ap1, ap2 := ap[0], ap[1]
	for _, tc := range []struct {
		ap     Applied[string]
		i      int // the update, from 0
		replay bool
		rehold bool
	}{
		{ap1, 0, true, false}, // before the message in progress
		{ap1, 1, true, true},
		{ap2, 0, true, true},
		{ap2, 2, true, true},
		{ap2, 3, false, false}, // the old owner never applied it
	} {
		at := Pos{Seq: tc.ap.Seq, No: tc.ap.No, N: tc.i + 1}
		if got := tc.ap.UpdateReplayed(tc.i); got != tc.replay {
			t.Errorf("record %d: UpdateReplayed(%d) = %v, want %v", tc.ap.No, tc.i, got, tc.replay)
		}
		if got := tc.replay && tc.ap.Rehold(at); got != tc.rehold {
			t.Errorf("record %d: Rehold(%v) = %v, want %v", tc.ap.No, at, got, tc.rehold)
		}
	}
	// The replay is over: what comes next applies as usual.
	a.Admit(Record[string]{Seq: 12, No: 3, Process: "p"})
	if ap, _ := a.Next(true); ap.Replayed() || ap.UpdateReplayed(0) || ap.Rehold(ap.At()) {
		t.Errorf("record 3 = %+v, want it applied as usual", ap)
	}
}

// The floor: a new owner must read again every record whose chunks may
// be buffered in memory: the last one applied, and every one applied
// while the buffer went on.
func TestApplierResumeFromTheBufferedChunks(t *testing.T) {
	a := New[string]("p", 10)
	run(t, a, false, "1@11")
	run(t, a, true, "2@12", "3@13")
	if from := a.ResumeFrom(); from != 11 {
		t.Errorf("ResumeFrom() = %d while chunks of 1 on are buffered, want 11", from)
	}
	run(t, a, false, "4@14") // nothing was buffered when 4 came
	if from := a.ResumeFrom(); from != 14 {
		t.Errorf("ResumeFrom() = %d, want 14", from)
	}
	p := a.ResumePoint(Pos{Seq: 14, No: 4, N: 2}, Pos{Seq: 14, No: 4, N: 1})
	if want := "14 4.2 4.1"; p.String() != want {
		t.Errorf("ResumePoint = %q, want %q", p, want)
	}
	if want := "14 4"; a.AcceptancePoint().String() != want {
		t.Errorf("AcceptancePoint = %q, want %q", a.AcceptancePoint(), want)
	}
}

// An acceptance during the new owner's own replay says what the old one
// applied: that is where a third owner resumes.
func TestApplierAcceptanceDuringAReplay(t *testing.T) {
	a := Resume[string]("p", ResumePoint{From: 10, Applied: Pos{No: 3, N: 2}, Held: Pos{No: 2, N: 1}})
	if want := "10 3.2"; a.AcceptancePoint().String() != want {
		t.Errorf("AcceptancePoint = %q, want %q", a.AcceptancePoint(), want)
	}
}

func TestApplierBoundsWhatIsHeld(t *testing.T) {
	a := New[string]("p", 0)
	var why string
	for no := uint64(2); why == "" && no < MaxHeldRecords+10; no++ {
		_, why = a.Admit(Record[string]{Seq: no, No: no, Process: "p"})
	}
	if a.Waiting() != MaxHeldRecords+1 || !strings.Contains(why, "waited behind them") {
		t.Errorf("the wait ended with %d held (%q), want it to end past %d", a.Waiting(), why, MaxHeldRecords)
	}
	b := New[string]("p", 0)
	b.Admit(Record[string]{Seq: 2, No: 2, Process: "p", Size: MaxHeldBytes})
	if _, why := b.Admit(Record[string]{Seq: 3, No: 3, Process: "p", Size: 1}); why == "" {
		t.Errorf("past %d bytes held, the wait goes on", MaxHeldBytes)
	}
}

// Whatever order the stream stores a process's records in, and however
// often, the applier hands each back once, in number order, once every
// number was stored.
func TestApplierAnyOrder(t *testing.T) {
	for seed := range uint64(200) {
		rnd := rand.New(rand.NewPCG(seed, 7))
		n := 1 + rnd.IntN(30)
		var stored []uint64
		for no := 1; no <= n; no++ {
			for range 1 + rnd.IntN(3) {
				stored = append(stored, uint64(no))
			}
		}
		rnd.Shuffle(len(stored), func(i, j int) { stored[i], stored[j] = stored[j], stored[i] })
		a := New[int]("p", 100)
		var applied []uint64
		for i, no := range stored {
			a.Admit(Record[int]{Seq: uint64(101 + i), No: no, Process: "p"})
			for ap, ok := a.Next(rnd.IntN(2) == 0); ok; ap, ok = a.Next(false) {
				applied = append(applied, ap.No)
			}
		}
		for i, no := range applied {
			if no != uint64(i+1) {
				t.Fatalf("seed %d: stored %v, applied %v", seed, stored, applied)
			}
		}
		if len(applied) != n || a.Waiting() != 0 {
			t.Fatalf("seed %d: stored %v, applied %v, %d still held", seed, stored, applied, a.Waiting())
		}
	}
}
