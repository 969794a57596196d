package testagent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"time"
)

// The commands of this file probe what the agent's process may do on its
// machine: read a file, write one, open a TCP connection, listen on a TCP
// port, run a shell command (sh, with the rest of the line: what a coding
// agent's shell tool does). Each reports the
// outcome as one agent_message_chunk, "<command> <target>: ok …" or
// "<command> <target>: error <why>", and the turn goes on either way, so
// that a sandbox test can try several things in one turn and see each
// answer.
const (
	opRead  opKind = "read"
	opWrite opKind = "write"
	opDial  opKind = "dial"
	opBind  opKind = "bind"
	opSh    opKind = "sh"
)

// maxShReport bounds the output of a shell command a report carries.
const maxShReport = 1024

// maxReadReport bounds the file content a read reports.
const maxReadReport = 256

// probes runs the probing commands; turn.exec hands them here.
var probes = map[opKind]func(op) string{
	opRead:  probeRead,
	opWrite: probeWrite,
	opDial:  probeDial,
	opBind:  probeBind,
	opSh:    probeSh,
}

func init() {
	keywords[opRead] = parseProbe
	keywords[opWrite] = parseProbe
	keywords[opDial] = parseProbe
	keywords[opBind] = parseProbe
	keywords[opSh] = parseCommand
}

// parseCommand takes the rest of the line as a shell command.
func parseCommand(o *op, args string) error {
	if args == "" {
		return errors.New("needs a shell command")
	}
	o.ID = args
	return nil
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

// probeBind listens on plain TCP. Go's net.Listen takes MPTCP where the
// kernel has it, which Landlock's TCP rules do not cover: a sandbox that
// denies binding must refuse MPTCP sockets by other means (seccomp).
func probeBind(o op) string {
	var lc net.ListenConfig
	lc.SetMultipathTCP(false)
	ln, err := lc.Listen(context.Background(), "tcp", o.ID)
	if err != nil {
		return fmt.Sprintf("bind %s: error %v", o.ID, err)
	}
	_ = ln.Close()
	return fmt.Sprintf("bind %s: ok", o.ID)
}

// probeSh runs the command with /bin/sh -c and waits for it; the report
// carries its output (stdout and stderr), up to maxShReport bytes.
func probeSh(o op) string {
	out, err := exec.Command("/bin/sh", "-c", o.ID).CombinedOutput()
	if len(out) > maxShReport {
		out = out[:maxShReport]
	}
	if err != nil {
		return fmt.Sprintf("sh %s: error %v %s", o.ID, err, out)
	}
	return fmt.Sprintf("sh %s: ok %s", o.ID, out)
}
