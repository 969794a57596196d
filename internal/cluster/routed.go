package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// AwaitRouted waits until every node routes every request subject the
// services serve. A service says "skein serving" once the node it is
// connected to holds its subscriptions; a request entering through another
// node finds no responders until the routes have carried them there. Start
// calls it; call it again after restarting a service.
//
// It asks the micro services for their endpoints ($SRV.INFO, as the ops
// user), then sends each endpoint a body that is not a request through
// each node until it is answered (with an error: nothing is done).
func (c *Cluster) AwaitRouted(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	urls := strings.Split(c.URL(UserOps), ",")
	subjects, err := c.endpoints(ctx, urls[0])
	if err != nil {
		return err
	}
	for _, url := range urls {
		nc, err := nats.Connect(url, c.natsOptions()...)
		if err != nil {
			return err
		}
		for _, subject := range subjects {
			if err := awaitAnswer(ctx, nc, subject); err != nil {
				nc.Close()
				return fmt.Errorf("%s through %s: %w", subject, nc.ConnectedServerName(), err)
			}
		}
		nc.Close()
	}
	return nil
}

// endpoints returns the request subjects of every micro service instance
// the cluster runs (the session replicas, the runner, history), the
// namespace wildcard filled with "default". The gateway and notify serve
// no request.
func (c *Cluster) endpoints(ctx context.Context, url string) ([]string, error) {
	want := 0
	for _, p := range c.Services {
		if !strings.HasPrefix(p.Name, Gateway+"-") && !strings.HasPrefix(p.Name, Notify+"-") {
			want++
		}
	}
	nc, err := nats.Connect(url, c.natsOptions()...)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	info, err := micro.ControlSubject(micro.InfoVerb, "", "") // $SRV.INFO: every service
	if err != nil {
		return nil, err
	}
	for {
		inbox := nc.NewInbox()
		sub, err := nc.SubscribeSync(inbox)
		if err != nil {
			return nil, err
		}
		if err := nc.PublishRequest(info, inbox, nil); err != nil {
			return nil, err
		}
		seen := map[string]bool{}
		var subjects []string
		for len(seen) < want {
			m, err := sub.NextMsg(time.Second)
			if err != nil {
				break
			}
			var info struct {
				ID        string `json:"id"`
				Endpoints []struct {
					Subject string `json:"subject"`
				} `json:"endpoints"`
			}
			if json.Unmarshal(m.Data, &info) != nil || seen[info.ID] {
				continue
			}
			seen[info.ID] = true
			for _, e := range info.Endpoints {
				subjects = append(subjects, strings.ReplaceAll(e.Subject, "*", "default"))
			}
		}
		_ = sub.Unsubscribe()
		if len(seen) >= want {
			return subjects, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%d of %d micro service instances answered $SRV.INFO: %w", len(seen), want, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// awaitAnswer sends subject a body that is not a request until a responder
// answers.
func awaitAnswer(ctx context.Context, nc *nats.Conn, subject string) error {
	for {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := nc.RequestWithContext(rctx, subject, []byte("not a request"))
		cancel()
		if err == nil {
			return nil
		}
		if !errors.Is(err, nats.ErrNoResponders) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond): // the routes carry the interest
		}
	}
}

// natsOptions are what a client of this cluster needs besides its URL.
func (c *Cluster) natsOptions() []nats.Option {
	if c.TLS == nil {
		return nil
	}
	return []nats.Option{nats.RootCAs(c.TLS.CA), nats.ClientCert(c.TLS.ClientCert, c.TLS.ClientKey)}
}
