package applier

import (
	"math"
	"strconv"
	"strings"
)

// Pos is where an adapter message is in the session's ACP_IO: the
// sequence of the runner record that carried it (Seq), the record's number
// among its process's records (No, HeaderRecordNo) and, for an update of
// an AdapterUpdates record (a burst the runner read at once), the update's
// number there, from 1 (N). N is 0 for any other record, and for a record
// taken whole. The zero Pos is no position: what it stamps did not come
// from ACP_IO.
//
// The owner applies a process's records in number order, which is not
// always the stream's (a record the runner published again after a fault
// is stored after records published later): positions of numbered records
// compare by number, and the sequence only locates the record.
type Pos struct {
	Seq uint64
	No  uint64
	N   int
}

// String is the position as HeaderIOSeq carries it: "1234", or "1234.3"
// for the third update of record 1234.
func (p Pos) String() string { return dotted(p.Seq, p.N) }

// Numbered is the position in record-number terms, as HeaderIOResume
// carries it: "17", or "17.3" for the third update of record number 17.
func (p Pos) Numbered() string { return dotted(p.No, p.N) }

func dotted(v uint64, n int) string {
	s := strconv.FormatUint(v, 10)
	if n != 0 {
		s += "." + strconv.Itoa(n)
	}
	return s
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

// After reports whether p comes later in ACP_IO than q: by record number
// when both have one, else by sequence. A record taken whole comes after
// every update in it.
func (p Pos) After(q Pos) bool {
	pv, qv := p.Seq, q.Seq
	if p.No != 0 && q.No != 0 {
		pv, qv = p.No, q.No
	}
	if pv != qv {
		return pv > qv
	}
	return rank(p.N) > rank(q.N)
}

func rank(n int) int {
	if n == 0 {
		return math.MaxInt
	}
	return n
}

// ResumePoint is what a log record tells a new owner about the adapter
// process's records (HeaderIOResume): From is an ACP_IO sequence at or
// before every record of the process not applied when the record was
// written (the owner may have held later-numbered records stored before a
// missing one, and the chunks of the message in progress are in memory
// only); Applied is the last update applied, by record number (No 0: no
// record of the process yet); Held, when the owner held chunks of a
// message in progress, is the first of them, by record number. Only the
// No and N of Applied and Held are carried.
type ResumePoint struct {
	From    uint64
	Applied Pos
	Held    Pos
}

// String is the point as HeaderIOResume carries it: "<from> <applied>" or
// "<from> <applied> <held>", the positions in numbered form.
func (r ResumePoint) String() string {
	s := strconv.FormatUint(r.From, 10) + " " + r.Applied.Numbered()
	if r.Held.No != 0 {
		s += " " + r.Held.Numbered()
	}
	return s
}

// ParseResumePoint reads a point in String's form. It refuses a point
// whose held chunks come after what was applied: they were applied first.
func ParseResumePoint(s string) (ResumePoint, bool) {
	f := strings.Fields(s)
	if len(f) < 2 || len(f) > 3 {
		return ResumePoint{}, false
	}
	var r ResumePoint
	var err error
	var ok bool
	if r.From, err = strconv.ParseUint(f[0], 10, 64); err != nil || r.From == 0 {
		return ResumePoint{}, false
	}
	if r.Applied.No, r.Applied.N, ok = parseDotted(f[1]); !ok || (r.Applied.No == 0 && r.Applied.N != 0) {
		return ResumePoint{}, false
	}
	if len(f) == 3 {
		if r.Held.No, r.Held.N, ok = parseDotted(f[2]); !ok || r.Held.No == 0 || r.Held.After(r.Applied) {
			return ResumePoint{}, false
		}
	}
	return r, true
}
