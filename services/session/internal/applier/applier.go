// Package applier puts the ACP_IO records of one adapter process in the
// order the runner numbered them, for the session's owner to apply. It
// reads no stream and holds no lock: the owner hands it each record it
// reads, in stream order, and applies what it hands back.
//
// The runner numbers the records of one adapter process (HeaderRecordNo)
// and publishes each until ACP_IO stores it, again with the same
// Nats-Msg-Id after a fault. ACP_IO may therefore store them out of number
// order (record 7 lost in an election, 8 stored, then 7's retry), and
// store a retry twice when it comes back after the duplicate window. The
// owner reads ACP_IO in stream order and admits each record (Admit); the
// applier hands the process's records back in number order (Next):
//
//   - a record numbered one past the last applied is ready, and so is
//     every held record that then follows in number;
//   - a record whose number was applied (or is held) is a duplicate, and
//     is passed over;
//   - a record after a gap is held until the gap fills. The wait is
//     bounded: by the process's exit record (nothing follows it) and by
//     MaxHeldRecords and MaxHeldBytes, which Admit reports, and by what the
//     owner knows (a timeout without progress, the runner's disappearance).
//     When it ends (SkipGap), the missing records are lost (Missing) and
//     what was held is applied in order.
//
// Records of another process (one the session no longer uses) and records
// without a number are passed over.
//
// A new owner that takes over a turn resumes where the old owner's newest
// log record says (Resume, a ResumePoint): it reads ACP_IO again from a
// sequence at or before every record the old owner had not applied, and
// the records up to the last update it applied come back marked as
// replayed (Applied.Replayed): the owner only holds the chunks of the
// message that was in progress in memory again (Applied.Rehold).
package applier

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// MaxHeldRecords and MaxHeldBytes bound what waits behind a gap: past
// either, the wait ends at once.
const (
	MaxHeldRecords = 4096
	MaxHeldBytes   = 64 << 20
)

// Record is one ACP_IO record as the applier orders it; Value is the
// record itself, which the applier does not read.
type Record[T any] struct {
	Seq     uint64 // its ACP_IO sequence
	Process string // the adapter process that wrote it (HeaderProcessID)
	No      uint64 // its number among the process's records; 0: none
	Exit    bool   // the process's exit record: nothing of the process follows it
	Size    int    // its size in bytes, for MaxHeldBytes
	Value   T
}

// Verdict is what Admit did with a record.
type Verdict int

const (
	// Foreign: a record of another adapter process, passed over.
	Foreign Verdict = iota
	// Unnumbered: a record without a number, passed over.
	Unnumbered
	// Duplicate: a record whose number was applied or is held, passed over.
	Duplicate
	// Held: a record after a gap, held until the gap fills.
	Held
	// Ready: the record is next in number; Next hands it back.
	Ready
)

var verdictNames = [...]string{"foreign", "unnumbered", "duplicate", "held", "ready"}

func (v Verdict) String() string {
	if int(v) < len(verdictNames) {
		return verdictNames[v]
	}
	return "verdict(" + strconv.Itoa(int(v)) + ")"
}

// Applier orders the records of one adapter process. The zero value is
// not usable: make one with New or Resume.
type Applier[T any] struct {
	process string
	// read is the ACP_IO sequence of the last record admitted, in stream
	// order: every record up to it was applied, held or passed over.
	read uint64
	// applied is the number of the last record of the process handed back
	// by Next; 0 before the first.
	applied uint64
	// held are records read before the one numbered applied+1, by number,
	// heldBytes their size.
	held      map[uint64]Record[T]
	heldBytes int
	// floor is the lowest ACP_IO sequence among the records applied since
	// the owner last buffered nothing (0: none yet): a new owner reading
	// from it finds every chunk still buffered in memory (ResumeFrom).
	floor uint64
	// replay, after a takeover, is the last update the old owner applied:
	// records up to it come back only for their chunks from replayHeld on
	// (the message in progress) to be held in memory again.
	replay, replayHeld Pos
}

// New returns the applier of a new adapter process, whose records are
// numbered from 1, for an ACP_IO read up to and including sequence read.
func New[T any](process string, read uint64) *Applier[T] {
	return &Applier[T]{process: process, read: read}
}

// Resume returns the applier of a process an old owner applied up to p:
// ACP_IO is read from p.From, where every record it had not applied lies;
// the records up to p.Applied come back replayed, those from p.Held on to
// be held again; what follows is applied as usual, in number order.
func Resume[T any](process string, p ResumePoint) *Applier[T] {
	a := &Applier[T]{process: process, read: p.From - 1, applied: p.Applied.No}
	if p.Held.No != 0 || p.Applied.N != 0 {
		first := p.Held
		if first.No == 0 {
			first = p.Applied // within a burst: its record is read again
		}
		a.applied = first.No - 1
		a.replay, a.replayHeld = p.Applied, p.Held
	}
	return a
}

// Process is the adapter process whose records the applier orders.
func (a *Applier[T]) Process() string { return a.process }

// Read is the ACP_IO sequence of the last record admitted: the next read
// of the stream starts after it.
func (a *Applier[T]) Read() uint64 { return a.read }

// Admit takes the next record of ACP_IO in stream order. When the record
// is held and the wait for the ones before it must end now (the process
// exited, or too much is held), giveUp says why, and the caller ends it
// with SkipGap.
func (a *Applier[T]) Admit(rec Record[T]) (v Verdict, giveUp string) {
	a.read = rec.Seq
	switch {
	case rec.Process != a.process:
		return Foreign, ""
	case rec.No == 0:
		return Unnumbered, ""
	}
	if _, held := a.held[rec.No]; held || rec.No <= a.applied {
		return Duplicate, ""
	}
	if a.held == nil {
		a.held = map[uint64]Record[T]{}
	}
	a.held[rec.No] = rec
	a.heldBytes += rec.Size
	if rec.No == a.applied+1 {
		return Ready, ""
	}
	switch {
	case rec.Exit:
		// The runner stores a process's exit after everything the process
		// wrote: what is missing now never comes.
		return Held, "the agent exited"
	case a.waiting() > MaxHeldRecords || a.heldBytes > MaxHeldBytes:
		return Held, fmt.Sprintf("%d records (%d bytes) waited behind them", a.waiting(), a.heldBytes)
	}
	return Held, ""
}

// waiting is how many records wait behind a gap.
func (a *Applier[T]) waiting() int {
	if _, ready := a.held[a.applied+1]; ready {
		return len(a.held) - 1
	}
	return len(a.held)
}

// Waiting is how many records wait behind a gap now.
func (a *Applier[T]) Waiting() int { return a.waiting() }

// HeldNumbers are the numbers of the records held, in order.
func (a *Applier[T]) HeldNumbers() []uint64 { return slices.Sorted(maps.Keys(a.held)) }

// Applied is the number of the last record Next handed back (0: none).
func (a *Applier[T]) Applied() uint64 { return a.applied }

// Next hands back the record that follows the last one applied, if it was
// admitted, and counts it applied. buffering says whether the owner holds
// chunks of a message in progress in memory now, before it applies the
// record (see ResumeFrom).
func (a *Applier[T]) Next(buffering bool) (Applied[T], bool) {
	rec, ok := a.held[a.applied+1]
	if !ok {
		return Applied[T]{}, false
	}
	delete(a.held, rec.No)
	a.heldBytes -= rec.Size
	a.applied = rec.No
	if !buffering || a.floor == 0 {
		a.floor = rec.Seq
	} else {
		a.floor = min(a.floor, rec.Seq)
	}
	out := Applied[T]{Record: rec, reholdFrom: a.replayHeld}
	if a.replay.No != 0 && rec.No <= a.replay.No {
		out.old = -1
		if rec.No == a.replay.No && a.replay.N != 0 {
			out.old = a.replay.N
		}
	}
	if rec.No >= a.replay.No {
		a.replay, a.replayHeld = Pos{}, Pos{}
	}
	return out, true
}

// SkipGap gives up the wait for the missing records before the first one
// held: Next then hands back the held ones, from it. It reports whether
// any record was held.
func (a *Applier[T]) SkipGap() bool {
	if len(a.held) == 0 {
		return false
	}
	a.applied = slices.Min(slices.Collect(maps.Keys(a.held))) - 1
	return true
}

// Missing names the records missing before the ones held ("7, 9-11") and
// counts them.
func (a *Applier[T]) Missing() (list string, n uint64) {
	var missing []string
	next := a.applied + 1
	for _, no := range a.HeldNumbers() {
		if no > next {
			n += no - next
			if no-1 == next {
				missing = append(missing, strconv.FormatUint(next, 10))
			} else {
				missing = append(missing, strconv.FormatUint(next, 10)+"-"+strconv.FormatUint(no-1, 10))
			}
		}
		next = no + 1
	}
	return strings.Join(missing, ", "), n
}

// Stop forgets what was held: the process's route ended.
func (a *Applier[T]) Stop() { a.held, a.heldBytes = nil, 0 }

// ResumeFrom is an ACP_IO sequence at or before every record of the
// process not yet applied: those held, those not read yet, and those
// whose chunks are buffered in memory (the floor).
func (a *Applier[T]) ResumeFrom() uint64 {
	from := a.read + 1
	if a.floor != 0 {
		from = min(from, a.floor)
	}
	for _, rec := range a.held {
		from = min(from, rec.Seq)
	}
	return from
}

// ResumePoint is what a record stamped at at tells a new owner, when the
// owner buffers chunks of a message in progress from bufferedFrom (zero:
// none buffered).
func (a *Applier[T]) ResumePoint(at, bufferedFrom Pos) ResumePoint {
	p := ResumePoint{From: a.ResumeFrom(), Applied: Pos{No: at.No, N: at.N}}
	if bufferedFrom.No != 0 {
		p.Held = Pos{No: bufferedFrom.No, N: bufferedFrom.N}
	}
	return p
}

// AcceptancePoint is what a turn's acceptance tells a new owner: the last
// record of the process applied (the old owner's own replay, if it has
// not finished it), and nothing buffered (the acceptance drops the
// chunks).
func (a *Applier[T]) AcceptancePoint() ResumePoint {
	p := ResumePoint{From: a.ResumeFrom(), Applied: Pos{No: a.applied}}
	if a.replay.No > a.applied {
		p.Applied = Pos{No: a.replay.No, N: a.replay.N}
	}
	return p
}

// Applied is a record Next hands back, with what an old owner applied of
// it already.
type Applied[T any] struct {
	Record[T]
	// old is how many of its updates an old owner applied: 0 none, -1
	// all of it.
	old        int
	reholdFrom Pos
}

// At is the record's position, taken whole.
func (ap Applied[T]) At() Pos { return Pos{Seq: ap.Seq, No: ap.No} }

// Replayed reports whether an old owner applied the whole record.
func (ap Applied[T]) Replayed() bool { return ap.old < 0 }

// UpdateReplayed reports whether an old owner applied the record's
// update i (from 0).
func (ap Applied[T]) UpdateReplayed(i int) bool { return ap.old < 0 || i < ap.old }

// Rehold reports whether a message chunk at at, which an old owner
// applied, is one it held in memory when it stopped (of the message then
// in progress): the owner holds it again. Anything else an old owner
// applied is in the log already.
func (ap Applied[T]) Rehold(at Pos) bool {
	return ap.reholdFrom.No != 0 && !ap.reholdFrom.After(at)
}
