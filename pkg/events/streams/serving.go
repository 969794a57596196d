package streams

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A stream restored from a backup on a cluster is, for a moment, served by
// replicas that do not hold it yet. The restore writes the snapshot on the
// stream's leader, and each follower then copies the records from the
// leader outside the Raft log (a catch-up). Consumers of one replica (every
// ephemeral and ordered one: the history service's watch, eventlog.Replay,
// `nats sub --stream`, `nats kv ls`) are placed on any replica, and one
// placed on a follower still catching up starts on an empty or partial
// store. With nats-server 2.15.3 the catch-up stores the records without
// waking the consumer: a pull request it holds waits for the next record
// written to the stream, which after a restore, with the services stopped,
// does not come (natscli's `nats sub --terminate-at-end` hangs, `nats kv ls`
// lists nothing). The leader's stream info may even report that follower
// current with no lag, before the follower has asked for its catch-up.
//
// AwaitServing is the wait that makes it safe to start the services: for
// each stream, a consumer placed on each of its replicas reads the stream's
// last record. A replica's catch-up copies the records in order, so the
// replica that serves the last one holds the stream.

// ServingWait bounds AwaitServing: a stream of a few million records
// catches up in well under it.
const ServingWait = 2 * time.Minute

// servingRead is how long a probe consumer waits for the last record. A
// replica that holds it delivers it at once; one still catching up never
// does (see above), so a short wait, then a new consumer, is the retry.
const servingRead = time.Second

// servingStall is how long reads on one replica may fail before the stream's
// leader is stepped down, in case the replica's catch-up has stalled: a new
// leader sends the followers a new snapshot to catch up from.
const servingStall = 15 * time.Second

// AwaitServing waits, for at most ServingWait, until every stream of
// Configs(o) serves its consumers on every replica: the stream has a
// leader, each replica is current with no lag, and an ephemeral consumer
// placed on each replica reads the stream's last record (an empty stream
// needs no read). report is called with a stream and what is awaited of it
// each time that changes, and once with "serving" when it is done.
//
// It costs a stream info and a few consumers per stream when all is well,
// so skein provision always runs it. It needs the right to create and
// delete consumers on every stream, which a service's user does not have:
// the services do not call it.
func AwaitServing(ctx context.Context, js jetstream.JetStream, o Options, report func(stream, status string)) error {
	ctx, cancel := context.WithTimeout(ctx, ServingWait)
	defer cancel()
	for _, cfg := range Configs(o) {
		if err := awaitStreamServing(ctx, js, cfg.Name, report); err != nil {
			return err
		}
	}
	return nil
}

// servingProbe is the state of one stream's wait.
type servingProbe struct {
	js     jetstream.JetStream
	name   string
	served map[string]bool // replicas (by server name) whose consumer read the last record
	// failing is the replica whose reads fail, and since when.
	failing      string
	failingSince time.Time
}

func awaitStreamServing(ctx context.Context, js jetstream.JetStream, name string, report func(stream, status string)) error {
	p := &servingProbe{js: js, name: name, served: map[string]bool{}}
	last := ""
	for {
		status, done, err := p.try(ctx)
		if err != nil && ctx.Err() == nil {
			status = err.Error()
		}
		if done {
			report(name, status)
			return nil
		}
		// Reported when it changes, not when only its figures do (a
		// replica's lag shrinking as it catches up).
		if key, _, _ := strings.Cut(status, " ("); key != last {
			report(name, "waiting for "+status)
			last = key
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stream %s does not serve its consumers after %v: still waiting for %s", name, ServingWait, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// try looks at the stream once. It returns what is awaited, or, with done
// set, a summary of what was seen.
func (p *servingProbe) try(ctx context.Context) (status string, done bool, err error) {
	str, err := p.js.Stream(ctx, p.name)
	if err != nil {
		return "a leader", false, fmt.Errorf("a leader (%w)", err)
	}
	info := str.CachedInfo()
	peers := []string{""} // a single server: no cluster, one replica
	if info.Cluster != nil && info.Cluster.Leader != "" {
		peers = []string{info.Cluster.Leader}
		for _, r := range info.Cluster.Replicas {
			switch {
			case r.Offline:
				return fmt.Sprintf("replica %s (offline)", r.Name), false, nil
			case !r.Current || r.Lag > 0:
				return fmt.Sprintf("replica %s to catch up (lag %d)", r.Name, r.Lag), false, nil
			}
			peers = append(peers, r.Name)
		}
	} else if info.Cluster != nil && len(info.Cluster.Replicas) > 0 {
		return "a leader", false, nil
	}
	if info.State.Msgs == 0 {
		return "serving (empty)", true, nil
	}
	seq, err := p.lastSeq(ctx, info.Config.Subjects)
	if err != nil {
		return "its last record", false, fmt.Errorf("its last record (%w)", err)
	}
	peer, read, err := p.read(ctx, str, seq)
	if err != nil {
		return "a consumer", false, fmt.Errorf("a consumer (%w)", err)
	}
	if !read {
		if peer != p.failing {
			p.failing, p.failingSince = peer, time.Now()
		} else if time.Since(p.failingSince) > servingStall {
			// Reads on that replica have failed too long for a catch-up
			// still running: a new leader sends a new snapshot.
			p.failingSince = time.Now()
			if err := p.stepDown(ctx); err != nil {
				return "a new leader", false, fmt.Errorf("a new leader (%w)", err)
			}
			return "a new leader", false, nil
		}
		return fmt.Sprintf("a consumer on %s to read the last record (%d)", peer, seq), false, nil
	}
	p.failing = ""
	p.served[peer] = true
	for _, s := range peers {
		if !p.served[s] {
			return fmt.Sprintf("a consumer on %s to read the last record (%d)", s, seq), false, nil
		}
	}
	return fmt.Sprintf("serving (a consumer on each of %s read record %d)", strings.Join(peers, ", "), seq), true, nil
}

// lastSeq returns the sequence of the stream's last record, as its leader
// holds it. The stream's own last sequence may name a record deleted since
// (a purged session, an expired lease), so this is the last of the records
// of its subjects, which the leader looks up in its store.
func (p *servingProbe) lastSeq(ctx context.Context, subjects []string) (uint64, error) {
	var last uint64
	for _, subj := range subjects {
		req, err := json.Marshal(map[string]string{"last_by_subj": subj})
		if err != nil {
			return 0, err
		}
		var resp struct {
			Error   *jetstream.APIError `json:"error"`
			Message struct {
				Sequence uint64 `json:"seq"`
			} `json:"message"`
		}
		// Not the jetstream package's GetLastMsgForSubject: with
		// AllowDirect it asks any replica, and one catching up answers
		// from what it holds.
		m, err := p.js.Conn().RequestWithContext(ctx, apiSubject(p.js, "STREAM.MSG.GET."+p.name), req)
		if err != nil {
			return 0, err
		}
		if err := json.Unmarshal(m.Data, &resp); err != nil {
			return 0, err
		}
		if resp.Error != nil {
			if resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound {
				continue
			}
			return 0, resp.Error
		}
		last = max(last, resp.Message.Sequence)
	}
	if last == 0 {
		return 0, errors.New("no record found")
	}
	return last, nil
}

// read creates an ephemeral consumer from seq, reads one record with it,
// and deletes it. It returns the replica the consumer was placed on and
// whether it read seq or a later record.
func (p *servingProbe) read(ctx context.Context, str jetstream.Stream, seq uint64) (peer string, read bool, err error) {
	cons, err := str.CreateConsumer(ctx, jetstream.ConsumerConfig{
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       seq,
		AckPolicy:         jetstream.AckNonePolicy,
		MemoryStorage:     true,
		Replicas:          1,
		InactiveThreshold: time.Minute, // should the delete below fail
	})
	if err != nil {
		return "", false, err
	}
	ci := cons.CachedInfo()
	defer func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = str.DeleteConsumer(ctx, ci.Name)
	}()
	if ci.Cluster != nil {
		peer = ci.Cluster.Leader
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(servingRead))
	if err != nil {
		return peer, false, err
	}
	for m := range batch.Messages() {
		if md, err := m.Metadata(); err == nil && md.Sequence.Stream >= seq {
			read = true
		}
	}
	if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, nats.ErrTimeout) {
		return peer, false, err
	}
	return peer, read, nil
}

// stepDown asks the stream's leader to step down, and a new one to be
// elected.
func (p *servingProbe) stepDown(ctx context.Context) error {
	m, err := p.js.Conn().RequestWithContext(ctx, apiSubject(p.js, "STREAM.LEADER.STEPDOWN."+p.name), nil)
	if err != nil {
		return err
	}
	var resp struct {
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return err
	}
	if resp.Error != nil {
		return resp.Error
	}
	return nil
}

// apiSubject is a JetStream API subject under js's API prefix.
func apiSubject(js jetstream.JetStream, name string) string {
	if p := js.Options().APIPrefix; p != "" {
		return p + name
	}
	return jetstream.DefaultAPIPrefix + name
}
