package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"golang.org/x/sync/errgroup"
)

// pprofUsage documents --pprof for skein serve and skein dev.
const pprofUsage = "serve net/http/pprof (/debug/pprof/) on this loopback address, e.g. 127.0.0.1:6060 (off when empty)"

// servePprof serves the runtime profiles on addr, a loopback address, until
// ctx is done. The handlers are registered on a mux of their own, never on
// http.DefaultServeMux, so nothing else is exposed with them.
func servePprof(ctx context.Context, addr string, lg *slog.Logger) error {
	if err := checkLoopback(addr); err != nil {
		return fmt.Errorf("--pprof: %w", err)
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("--pprof: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	lg.Info("pprof listening", "addr", ln.Addr().String())
	// A CPU profile or trace in progress is cut short: its handler ends
	// with its request's context.
	if err := serveUntilDone(ctx, &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}, ln, true); err != nil {
		return fmt.Errorf("--pprof: %w", err)
	}
	return nil
}

// serveUntilDone serves srv on ln until ctx is done or serving fails, then
// shuts srv down and returns once it has: its handlers have returned, or
// httpShutdownWait passed and its connections were closed. With
// cancelRequests, the requests' contexts end as shutdown begins, for
// handlers that would otherwise run on (a profile's); without, requests
// in flight get httpShutdownWait to finish. It returns the error that
// stopped serving, nil when ctx ended.
func serveUntilDone(ctx context.Context, srv *http.Server, ln net.Listener, cancelRequests bool) error {
	reqCtx, endRequests := context.WithCancel(context.WithoutCancel(ctx))
	defer endRequests()
	srv.BaseContext = func(net.Listener) context.Context { return reqCtx }
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	var err error
	select {
	case err = <-serveErr:
	case <-ctx.Done():
	}
	if cancelRequests {
		endRequests()
	}
	// A fresh context: ctx is already done (STYLE R12, R14).
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), httpShutdownWait)
	defer cancel()
	if serr := srv.Shutdown(sctx); serr != nil {
		_ = srv.Close()
	}
	if err == nil {
		err = <-serveErr // Shutdown made it return
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// httpShutdownWait bounds the shutdown of the metrics and profile
// servers.
const httpShutdownWait = 2 * time.Second

// checkPprofFlag checks --pprof: empty (off) or a loopback address. skein
// serve and dev check it before they start anything.
func checkPprofFlag(addr string) error {
	if addr == "" {
		return nil
	}
	if err := checkLoopback(addr); err != nil {
		return fmt.Errorf("--pprof: %w", err)
	}
	return nil
}

// checkLoopback accepts host:port whose host is a loopback IP or localhost:
// profiles show the process's internals and must not be reachable from the
// network.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("%q is not a loopback address (want 127.0.0.1:PORT, [::1]:PORT or localhost:PORT)", addr)
	}
	return nil
}

// runWithPprof runs run, and the profile server beside it when addr is set;
// either one failing stops the other.
func runWithPprof(ctx context.Context, addr string, lg *slog.Logger, run func(context.Context) error) error {
	if addr == "" {
		return run(ctx)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return servePprof(gctx, addr, lg) })
	g.Go(func() error {
		defer cancel()
		return run(gctx)
	})
	return g.Wait()
}
