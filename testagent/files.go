package testagent

import (
	"errors"
	"fmt"
	"net"
	"os"
	"time"
)

// The commands of this file probe what the agent's process may do on its
// machine: read a file, write one, open a TCP connection. Each reports the
// outcome as one agent_message_chunk, "<command> <target>: ok …" or
// "<command> <target>: error <why>", and the turn goes on either way, so
// that a sandbox test can try several things in one turn and see each
// answer.
const (
	opRead  opKind = "read"
	opWrite opKind = "write"
	opDial  opKind = "dial"
)

// maxReadReport bounds the file content a read reports.
const maxReadReport = 256

// probes runs the probing commands; turn.exec hands them here.
var probes = map[opKind]func(op) string{
	opRead:  probeRead,
	opWrite: probeWrite,
	opDial:  probeDial,
}

func init() {
	keywords[opRead] = parseProbe
	keywords[opWrite] = parseProbe
	keywords[opDial] = parseProbe
}

// parseProbe takes a target (a path, or host:port for dial) and, for
// write, the text after it.
func parseProbe(o *op, args string) error {
	target, text := cutWord(args)
	if target == "" {
		return errors.New("needs a path (or host:port)")
	}
	o.ID, o.Text = target, unquote(text)
	return nil
}

func probeRead(o op) string {
	b, err := os.ReadFile(o.ID)
	if err != nil {
		return fmt.Sprintf("read %s: error %v", o.ID, err)
	}
	if len(b) > maxReadReport {
		b = b[:maxReadReport]
	}
	return fmt.Sprintf("read %s: ok %s", o.ID, b)
}

func probeWrite(o op) string {
	if err := os.WriteFile(o.ID, []byte(o.Text), 0o600); err != nil {
		return fmt.Sprintf("write %s: error %v", o.ID, err)
	}
	return fmt.Sprintf("write %s: ok", o.ID)
}

func probeDial(o op) string {
	c, err := net.DialTimeout("tcp", o.ID, 10*time.Second)
	if err != nil {
		return fmt.Sprintf("dial %s: error %v", o.ID, err)
	}
	_ = c.Close()
	return fmt.Sprintf("dial %s: ok", o.ID)
}
