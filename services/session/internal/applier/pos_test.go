package applier

import "testing"

func TestPosOrder(t *testing.T) {
	// In ACP_IO order: 5.1 < 5.2 < 5 (the whole record) < 6.1.
	// Numbered positions compare by number, whatever the sequences: the
	// record numbered 3 was stored last.
	for _, order := range [][]Pos{
		{{Seq: 5, N: 1}, {Seq: 5, N: 2}, {Seq: 5}, {Seq: 6, N: 1}},
		{{Seq: 9, No: 2, N: 1}, {Seq: 9, No: 2}, {Seq: 12, No: 3, N: 1}, {Seq: 12, No: 3}, {Seq: 10, No: 4}},
	} {
		for i, p := range order {
			for j, q := range order {
				if got := p.After(q); got != (i > j) {
					t.Errorf("%v.After(%v) = %v", p, q, got)
				}
			}
		}
	}
}

func TestPosString(t *testing.T) {
	for _, tc := range []struct {
		p             Pos
		str, numbered string
	}{
		{Pos{Seq: 1234}, "1234", "0"},
		{Pos{Seq: 1234, No: 7, N: 3}, "1234.3", "7.3"},
		{Pos{Seq: 9, No: 2}, "9", "2"},
	} {
		if got := tc.p.String(); got != tc.str {
			t.Errorf("%+v.String() = %q, want %q", tc.p, got, tc.str)
		}
		if got := tc.p.Numbered(); got != tc.numbered {
			t.Errorf("%+v.Numbered() = %q, want %q", tc.p, got, tc.numbered)
		}
	}
}

func TestResumePoint(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
		p  ResumePoint
	}{
		{"12 0", true, ResumePoint{From: 12}},
		{"12 7", true, ResumePoint{From: 12, Applied: Pos{No: 7}}},
		{"12 7.2 5.3", true, ResumePoint{From: 12, Applied: Pos{No: 7, N: 2}, Held: Pos{No: 5, N: 3}}},
		{"12 7 7.1", true, ResumePoint{From: 12, Applied: Pos{No: 7}, Held: Pos{No: 7, N: 1}}},
		{"12 7.1 7", false, ResumePoint{}}, // held after applied
		{"12 7 8", false, ResumePoint{}},
		{"0 7", false, ResumePoint{}},
		{"12 0.1", false, ResumePoint{}},
		{"12 7.0", false, ResumePoint{}},
		{"12 7.", false, ResumePoint{}},
		{"12 .3", false, ResumePoint{}},
		{"12 x", false, ResumePoint{}},
		{"12", false, ResumePoint{}},
		{"12 7 5 1", false, ResumePoint{}},
		{"", false, ResumePoint{}},
	} {
		p, ok := ParseResumePoint(tc.in)
		if ok != tc.ok || p != tc.p {
			t.Errorf("ParseResumePoint(%q) = %+v, %v; want %+v, %v", tc.in, p, ok, tc.p, tc.ok)
		}
		if ok && p.String() != tc.in {
			t.Errorf("%+v.String() = %q, want %q", p, p.String(), tc.in)
		}
	}
}

// FuzzResumePoint: a resume point is read from a log record's header.
// What parses prints back to a string that parses the same, and a point
// that parses resumes an applier without a panic.
func FuzzResumePoint(f *testing.F) {
	for _, s := range []string{"12 0", "12 7", "12 7.2 5.3", "12 7 7.1", "18446744073709551615 18446744073709551615.2", "1 0.1", "1 1.0", "1 1..2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, ok := ParseResumePoint(s)
		if !ok {
			return
		}
		if q, ok := ParseResumePoint(p.String()); !ok || q != p {
			t.Errorf("ParseResumePoint(%q) = %+v, whose String %q parses to %+v, %v", s, p, p.String(), q, ok)
		}
		a := Resume[int]("p", p)
		if a.Read() != p.From-1 {
			t.Errorf("Resume(%+v).Read() = %d, want %d", p, a.Read(), p.From-1)
		}
	})
}
