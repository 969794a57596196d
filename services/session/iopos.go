package session

import (
	"math"
	"strconv"
	"strings"
)

// ioPos is where an adapter message is in the session's ACP_IO: the
// sequence of the runner record that carried it, the record's number among
// its process's records (HeaderRecordNo; 0 for a record without one) and,
// for an update of an AdapterUpdates record (a burst the runner read at
// once), the update's number there, from 1. n is 0 for any other record,
// and for a record taken whole. The zero ioPos is no position: what it
// stamps did not come from ACP_IO.
//
// The owner applies a process's records in number order, which is not
// always the stream's (a record the runner published again after a fault
// is stored after records published later): positions of numbered records
// compare by number, and the sequence only locates the record.
type ioPos struct {
	seq uint64
	no  uint64
	n   int
}

// String is the position as HeaderIOSeq and HeaderIOHeld carry it: "1234",
// or "1234.3" for the third update of record 1234.
func (p ioPos) String() string { return dotted(p.seq, p.n) }

// numbered is the position in record-number terms, as HeaderIOResume
// carries it: "17", or "17.3" for the third update of record number 17.
func (p ioPos) numbered() string { return dotted(p.no, p.n) }

func dotted(v uint64, n int) string {
	s := strconv.FormatUint(v, 10)
	if n != 0 {
		s += "." + strconv.Itoa(n)
	}
	return s
}

// parseIOPos reads a position in String's form.
func parseIOPos(s string) (ioPos, bool) {
	seq, n, ok := parseDotted(s)
	if !ok || seq == 0 {
		return ioPos{}, false
	}
	return ioPos{seq: seq, n: n}, true
}

// parseDotted reads "v" or "v.n" (n at least 1).
func parseDotted(s string) (uint64, int, bool) {
	head, tail, dotted := strings.Cut(s, ".")
	v, err := strconv.ParseUint(head, 10, 64)
	if err != nil {
		return 0, 0, false
	}
	n := 0
	if dotted {
		if n, err = strconv.Atoi(tail); err != nil || n < 1 {
			return 0, 0, false
		}
	}
	return v, n, true
}

// after reports whether p comes later in ACP_IO than q: by record number
// when both have one, else by sequence. A record taken whole comes after
// every update in it.
func (p ioPos) after(q ioPos) bool {
	pv, qv := p.seq, q.seq
	if p.no != 0 && q.no != 0 {
		pv, qv = p.no, q.no
	}
	if pv != qv {
		return pv > qv
	}
	return rank(p.n) > rank(q.n)
}

func rank(n int) int {
	if n == 0 {
		return math.MaxInt
	}
	return n
}

// resumePoint is what a log record tells a new owner about the adapter
// process's records (HeaderIOResume): from is an ACP_IO sequence at or
// before every record of the process not applied when the record was
// written (the owner may have held later-numbered records stored before a
// missing one, and the chunks of the message in progress are in memory
// only); applied is the last update applied, by record number (no 0: no
// record of the process yet); held, when the owner held chunks of a
// message in progress, is the first of them, by record number.
type resumePoint struct {
	from    uint64
	applied ioPos
	held    ioPos
}

// String is the point as HeaderIOResume carries it: "<from> <applied>" or
// "<from> <applied> <held>", the positions in numbered form.
func (r resumePoint) String() string {
	s := strconv.FormatUint(r.from, 10) + " " + r.applied.numbered()
	if r.held.no != 0 {
		s += " " + r.held.numbered()
	}
	return s
}

// parseResumePoint reads a point in String's form.
func parseResumePoint(s string) (resumePoint, bool) {
	f := strings.Fields(s)
	if len(f) < 2 || len(f) > 3 {
		return resumePoint{}, false
	}
	var r resumePoint
	var err error
	var ok bool
	if r.from, err = strconv.ParseUint(f[0], 10, 64); err != nil || r.from == 0 {
		return resumePoint{}, false
	}
	if r.applied.no, r.applied.n, ok = parseDotted(f[1]); !ok || (r.applied.no == 0 && r.applied.n != 0) {
		return resumePoint{}, false
	}
	if len(f) == 3 {
		if r.held.no, r.held.n, ok = parseDotted(f[2]); !ok || r.held.no == 0 || r.held.after(r.applied) {
			return resumePoint{}, false
		}
	}
	return r, true
}
