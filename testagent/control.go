package testagent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// The pause/release protocol between the agent and a test, through files in
// the control directory D:
//
//  1. The script command "pause NAME" creates D/NAME.paused, then waits.
//  2. The test creates D/NAME.release (Release does this).
//  3. The agent removes D/NAME.paused, then D/NAME.release, and continues.
//
// A release file that already exists when the agent reaches the pause lets
// it pass straight through. A session/cancel during the wait removes
// D/NAME.paused and ends the turn with stopReason "cancelled"; a release file
// created later is left for the next pause of that name.

// pollInterval is how often both sides look for the other side's file.
// Polling a stat every millisecond costs nothing measurable and, unlike
// inotify, works the same on every platform and file system.
const pollInterval = time.Millisecond

// PausedFile returns the file the agent creates while paused at name.
func PausedFile(dir, name string) string { return filepath.Join(dir, name+".paused") }

// ReleaseFile returns the file that releases the agent paused at name.
func ReleaseFile(dir, name string) string { return filepath.Join(dir, name+".release") }

// WaitPaused blocks until an agent using control directory dir is paused at
// name, or ctx is done.
func WaitPaused(ctx context.Context, dir, name string) error {
	return pollUntil(ctx, func() (bool, error) { return exists(PausedFile(dir, name)) })
}

// Release lets the agent paused at name continue and waits until it has
// consumed the release (both files are gone), so the same name can be
// paused at again without racing the previous pause. If the agent has not
// reached the pause yet, Release waits until it has passed it. It returns
// ctx's error if ctx ends first, for example because the turn was cancelled
// and will never consume the release.
func Release(ctx context.Context, dir, name string) error {
	if err := os.WriteFile(ReleaseFile(dir, name), nil, 0o644); err != nil {
		return fmt.Errorf("release %s: %w", name, err)
	}
	return pollUntil(ctx, func() (bool, error) {
		ok, err := exists(ReleaseFile(dir, name))
		return !ok, err
	})
}

// errNoControlDir is reported for "pause" when the agent has no control dir.
var errNoControlDir = errors.New("no control dir (set -control-dir or " + EnvControlDir + ")")

// pause implements the agent side. It returns nil once released, or
// cancelled's cause (errTurnCancelled) when the turn is cancelled first.
func pause(ctx context.Context, dir, name, sessionID string, cancelled <-chan struct{}) error {
	if dir == "" {
		return errNoControlDir
	}
	paused, release := PausedFile(dir, name), ReleaseFile(dir, name)
	if err := os.WriteFile(paused, []byte(sessionID+"\n"), 0o644); err != nil {
		return fmt.Errorf("pause %s: %w", name, err)
	}
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		ok, err := exists(release)
		if err != nil {
			os.Remove(paused)
			return fmt.Errorf("pause %s: %w", name, err)
		}
		if ok {
			// Paused goes first: once the release file is gone, a test that
			// waited for that (Release) must not see a stale paused file.
			err := errors.Join(removeIfExists(paused), removeIfExists(release))
			if err != nil {
				return fmt.Errorf("pause %s: %w", name, err)
			}
			return nil
		}
		select {
		case <-t.C:
		case <-cancelled:
			os.Remove(paused)
			return errTurnCancelled
		case <-ctx.Done():
			os.Remove(paused)
			return errTurnCancelled
		}
	}
}

// pollUntil calls cond every pollInterval until it returns true or an
// error, or ctx is done.
func pollUntil(ctx context.Context, cond func() (bool, error)) error {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

func exists(path string) (bool, error) {
	_, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

func removeIfExists(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
