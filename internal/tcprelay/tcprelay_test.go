package tcprelay_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"skein.dev/internal/tcprelay"
)

// echo is a target that echoes every line and counts its connections.
type echo struct {
	ln       net.Listener
	accepted atomic.Int32
}

func startEcho(t *testing.T) *echo {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &echo{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			e.accepted.Add(1)
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	return e
}

func startRelay(t *testing.T, target string) *tcprelay.Relay {
	t.Helper()
	r, err := tcprelay.New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func dial(t *testing.T, r *tcprelay.Relay) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

func roundTrip(t *testing.T, c net.Conn, rd *bufio.Reader, line string) {
	t.Helper()
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		t.Fatal(err)
	}
	got, err := rd.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	if got != line+"\n" {
		t.Fatalf("echo %q, want %q", got, line)
	}
}

// quiet reports whether nothing arrives on c for a moment. It can only
// wrongly pass on a machine too slow to deliver within it, never wrongly
// fail.
func quiet(t *testing.T, c net.Conn, rd *bufio.Reader) bool {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	defer c.SetReadDeadline(time.Time{})
	_, err := rd.ReadByte()
	return errors.Is(err, os.ErrDeadlineExceeded)
}

func TestRelayForwards(t *testing.T) {
	r := startRelay(t, startEcho(t).ln.Addr().String())
	c, rd := dial(t, r)
	for _, line := range []string{"one", "two", string(make([]byte, 100<<10))} {
		roundTrip(t, c, rd, line)
	}
}

func TestRelayCut(t *testing.T) {
	e := startEcho(t)
	r := startRelay(t, e.ln.Addr().String())
	c, rd := dial(t, r)
	roundTrip(t, c, rd, "before")
	r.Cut()
	if _, err := rd.ReadByte(); err == nil {
		t.Fatal("a connection read after the cut")
	}
	// A new connection is accepted and closed, and never reaches the
	// target.
	c2, rd2 := dial(t, r)
	io.WriteString(c2, "during\n")
	if _, err := rd2.ReadByte(); err == nil {
		t.Fatal("a connection made during the cut read")
	}
	if n := e.accepted.Load(); n != 1 {
		t.Fatalf("target accepted %d connections, want 1 (none during the cut)", n)
	}
	r.Heal()
	c3, rd3 := dial(t, r)
	roundTrip(t, c3, rd3, "after")
}

func TestRelayBlackhole(t *testing.T) {
	e := startEcho(t)
	r := startRelay(t, e.ln.Addr().String())
	c, rd := dial(t, r)
	roundTrip(t, c, rd, "before")
	r.Blackhole()
	if _, err := io.WriteString(c, "held\n"); err != nil {
		t.Fatal(err)
	}
	if !quiet(t, c, rd) {
		t.Fatal("a byte crossed the blackhole")
	}
	// A connection made meanwhile does not reach the target.
	c2, rd2 := dial(t, r)
	io.WriteString(c2, "new\n")
	if !quiet(t, c2, rd2) {
		t.Fatal("a new connection's byte crossed the blackhole")
	}
	if n := e.accepted.Load(); n != 1 {
		t.Fatalf("target accepted %d connections during the blackhole, want 1", n)
	}
	r.Heal()
	// What was held moves on, in order, on both connections.
	for _, cr := range []struct {
		rd   *bufio.Reader
		want string
	}{{rd, "held\n"}, {rd2, "new\n"}} {
		got, err := cr.rd.ReadString('\n')
		if err != nil || got != cr.want {
			t.Fatalf("after heal: %q, %v; want %q", got, err, cr.want)
		}
	}
	roundTrip(t, c, rd, "after")
}

func TestRelayCutDuringBlackhole(t *testing.T) {
	r := startRelay(t, startEcho(t).ln.Addr().String())
	c, rd := dial(t, r)
	roundTrip(t, c, rd, "before")
	r.Blackhole()
	io.WriteString(c, "held\n")
	r.Cut()
	if _, err := rd.ReadByte(); err == nil {
		t.Fatal("a connection held by a blackhole read after the cut")
	}
	r.Heal()
	c2, rd2 := dial(t, r)
	roundTrip(t, c2, rd2, "after")
}
