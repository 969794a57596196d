package session

import (
	"math"
	"strconv"
	"strings"
)

// ioPos is where an adapter message is in the session's ACP_IO: the
// sequence of the runner record that carried it and, for an update of an
// AdapterUpdates record (a burst the runner read at once), the update's
// number there, from 1. n is 0 for any other record, and for a record
// taken whole. The zero ioPos is no position: what it stamps did not come
// from ACP_IO.
type ioPos struct {
	seq uint64
	n   int
}

// String is the position as HeaderIOSeq and HeaderIOHeld carry it: "1234",
// or "1234.3" for the third update of record 1234.
func (p ioPos) String() string {
	s := strconv.FormatUint(p.seq, 10)
	if p.n != 0 {
		s += "." + strconv.Itoa(p.n)
	}
	return s
}

// parseIOPos reads a position in String's form.
func parseIOPos(s string) (ioPos, bool) {
	seq, n, dotted := strings.Cut(s, ".")
	var p ioPos
	var err error
	if p.seq, err = strconv.ParseUint(seq, 10, 64); err != nil || p.seq == 0 {
		return ioPos{}, false
	}
	if dotted {
		if p.n, err = strconv.Atoi(n); err != nil || p.n < 1 {
			return ioPos{}, false
		}
	}
	return p, true
}

// after reports whether p comes later in ACP_IO than q. A record taken
// whole comes after every update in it.
func (p ioPos) after(q ioPos) bool {
	if p.seq != q.seq {
		return p.seq > q.seq
	}
	return rank(p.n) > rank(q.n)
}

func rank(n int) int {
	if n == 0 {
		return math.MaxInt
	}
	return n
}
