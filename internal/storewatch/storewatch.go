// Package storewatch tells whether JetStream's store refuses Skein's
// writes: the gateway's /readyz says so, and the session service ends a
// turn whose agent's output cannot be stored (storage_full).
//
// A Watch knows it two ways. It reads the account's JetStream usage
// ($JS.API.INFO), at most every InfoEvery while asked: within a headroom
// of the account's store limit, when the account has one, the store is
// full (skein dev gives Skein's account the server's limit; a cluster's
// operator sets one in accounts.conf to have it seen before a write is
// refused). And it is told of every write refused for want of room
// (Refused; eventlog.StorageFull), whatever the limit that refused it
// (the server's max_file_store, the account's): the store counts as full
// until a usage read after the refusal says otherwise, when the account
// has a limit; else for RefusalFor, or until it is told of a write the
// store took (Stored).
package storewatch

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

const (
	// RefusalFor is how long a refused write keeps the store full.
	RefusalFor = 15 * time.Second
	// InfoEvery bounds how often the account's usage is read.
	InfoEvery = 2 * time.Second
	// Headroom: an account's store this near its limit takes no record
	// worth writing.
	Headroom uint64 = 1 << 20
	// infoTimeout bounds one read of the account's usage.
	infoTimeout = time.Second
)

// Usage is the account's store as last read: Limit <= 0 when the account
// has none (or it was never read).
type Usage struct {
	Bytes uint64
	Limit int64
}

// Watch is what a service knows of the store's room. Its methods are safe
// for concurrent use.
type Watch struct {
	js jetstream.JetStream

	mu      sync.Mutex
	refused time.Time // the last refusal noted
	read    time.Time // the last read of the account's usage (or try)
	usage   Usage
	usageAt time.Time // when usage was read
}

// New returns a Watch that reads the usage of js's account.
func New(js jetstream.JetStream) *Watch { return &Watch{js: js} }

// Refused notes a write the store refused for want of room.
func (w *Watch) Refused() {
	w.mu.Lock()
	w.refused = time.Now()
	w.mu.Unlock()
}

// Stored notes a write the store took: a refusal noted before it no
// longer counts (the store has room again, or the refusal was of a record
// larger than this one).
func (w *Watch) Stored() {
	w.mu.Lock()
	w.refused = time.Time{}
	w.mu.Unlock()
}

// Full reports whether the store refuses writes of up to headroom bytes
// (Headroom: any worth writing), with the account's usage as last read.
// It reads the usage when the last read is InfoEvery old; a read that
// fails leaves the last one.
func (w *Watch) Full(ctx context.Context, headroom uint64) (Usage, bool) {
	return w.full(ctx, headroom, InfoEvery)
}

// FullNow is Full with the account's usage read now: for a caller about
// to act on the answer once, where a usage InfoEvery old could refuse
// what the store takes again.
func (w *Watch) FullNow(ctx context.Context, headroom uint64) (Usage, bool) {
	return w.full(ctx, headroom, 0)
}

// full is Full with usage read when older than maxAge. A refusal counts
// until a usage read after it says how full the store is, when the
// account has a limit; else for RefusalFor, or until a write is stored.
func (w *Watch) full(ctx context.Context, headroom uint64, maxAge time.Duration) (Usage, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	if now.Sub(w.read) >= maxAge {
		cctx, cancel := context.WithTimeout(ctx, infoTimeout)
		info, err := w.js.AccountInfo(cctx)
		cancel()
		if err == nil {
			w.usage = Usage{Bytes: info.Store, Limit: info.Limits.MaxStore}
			w.usageAt = now
		}
		w.read = now
	}
	if w.usage.Limit > 0 && !w.usageAt.Before(w.refused) {
		return w.usage, w.usage.Bytes+headroom >= uint64(w.usage.Limit)
	}
	refused := !w.refused.IsZero() && now.Sub(w.refused) < RefusalFor
	atLimit := w.usage.Limit > 0 && w.usage.Bytes+headroom >= uint64(w.usage.Limit)
	return w.usage, refused || atLimit
}
