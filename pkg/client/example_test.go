package client_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"

	"github.com/nats-io/nats.go"

	"skein.dev/pkg/client"
	"skein.dev/pkg/events/eventjson"
)

// Follow every session of the namespace "default" live, printing each
// durable event as it is stored, until interrupted (docs/CLIENT.md).
func Example_follow() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	cl, err := client.New(nc, client.WithNamespace("default"))
	if err != nil {
		log.Fatal(err)
	}
	for ev, err := range cl.Follow(ctx) {
		if err != nil {
			log.Print(err) // ctx's end, or a read that failed
			return
		}
		line, err := eventjson.Durable(ev) // the gateway's JSON of it
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s\n", line)
	}
}
