package test

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// devOptions says how startDev runs skein dev.
type devOptions struct {
	data   string // --data
	agents string // --agents: a registry file ("": skein dev's own agents)
	http   string // --http ("": a free port skein dev picks)
	dir    string // its working directory ("": the test's)
	// auth keeps skein dev's bearer token on; without it the gateway takes
	// requests without one (--gateway.insecure-no-auth).
	auth bool
	// natsListen makes skein dev's NATS server listen on a free loopback
	// port, which its welcome names, for another process to join.
	natsListen bool
	flags      []string // more flags, after the others
}

// devProcess is skein dev running as a process.
type devProcess struct {
	cmd    *exec.Cmd
	url    string // the gateway's http://…
	base   string // url + "/v1/sessions/"
	data   string // its data directory
	log    string // the file of what it printed, standard output and error
	exited chan struct{}
	err    error // how it exited, once exited is closed
}

// startDev starts skein dev as o says, with none of the SKEIN_ and NATS_
// variables of the test's environment, and returns once its welcome names
// its addresses; or an error if it ended first. It is stopped (SIGTERM)
// when the test ends, and not killed: a killed skein dev leaves its
// adapters' cgroups, and what they hold, to the next one on its data
// directory.
//
// What it prints goes to a file, not a pipe: a process an agent left
// behind holds no pipe that would keep Wait from returning.
func startDev(t *testing.T, o devOptions) (*devProcess, error) {
	t.Helper()
	http := o.http
	if http == "" {
		// Port 0: skein dev picks a free port and prints it (a port the
		// test picked could be taken by another process before skein binds).
		http = "127.0.0.1:0"
	}
	args := []string{"dev", "--data", o.data, "--http", http}
	if o.agents != "" {
		args = append(args, "--agents", o.agents)
	}
	if o.natsListen {
		args = append(args, "--nats-listen", "127.0.0.1:0")
	}
	if !o.auth {
		args = append(args, "--gateway.insecure-no-auth")
	}
	out, err := os.CreateTemp(t.TempDir(), "dev-out")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd := exec.Command(skeinBin(t), append(args, o.flags...)...)
	cmd.Dir = o.dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SKEIN_") && !strings.HasPrefix(kv, "NATS_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &devProcess{cmd: cmd, data: o.data, log: out.Name(), exited: make(chan struct{})}
	go func() { d.err = cmd.Wait(); close(d.exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		<-d.exited
		if t.Failed() {
			t.Logf("skein dev output:\n%s", d.output())
		}
	})
	for {
		out := d.output()
		d.url = welcomeURL(out, "HTTP")
		if d.url != "" && (welcomeURL(out, "NATS") != "" || !o.natsListen) {
			break
		}
		select {
		case <-d.exited:
			return nil, fmt.Errorf("skein dev on %s ended at start: %v\n%s", http, d.err, out)
		case <-time.After(10 * time.Millisecond):
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		}
	}
	d.base = d.url + "/v1/sessions/"
	return d, nil
}

// mustStartDev is startDev, failing the test if skein dev ended at start.
func mustStartDev(t *testing.T, o devOptions) *devProcess {
	t.Helper()
	d, err := startDev(t, o)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// output returns what skein dev printed so far.
func (d *devProcess) output() string {
	b, _ := os.ReadFile(d.log)
	return string(b)
}

// kill kills skein dev with SIGKILL: nothing is cleaned up.
func (d *devProcess) kill() {
	_ = d.cmd.Process.Kill()
	<-d.exited
}

// stop stops skein dev as a person does (SIGTERM), and fails the test
// unless it exits cleanly.
func (d *devProcess) stop(t *testing.T) {
	t.Helper()
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	<-d.exited
	if d.err != nil {
		t.Errorf("skein dev: %v\n%s", d.err, d.output())
	}
}

// js returns JetStream on skein dev's NATS server, as its admin: its
// NATS takes no client without a user.
func (d *devProcess) js(t *testing.T) jetstream.JetStream {
	t.Helper()
	url := devUserURL(t, d.data, devAdminUser)
	var nc *nats.Conn
	err := pollFor(t.Context(), "skein dev's NATS server", func() bool {
		var err error
		nc, err = nats.Connect(url)
		return err == nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// welcomeURL returns the URL skein dev's welcome prints after label
// ("HTTP", "NATS"), or "".
func welcomeURL(out, label string) string {
	for line := range strings.Lines(out) {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == label {
			return f[1]
		}
	}
	return ""
}
