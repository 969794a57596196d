module skein.dev/pkg/client

go 1.26.8

require (
	github.com/nats-io/nats.go v1.55.0
	skein.dev/pkg/events v0.0.0
)

replace skein.dev/pkg/events => ../events

require skein.dev/internal v0.0.0 // indirect

require (
	github.com/go-json-experiment/json v1.27.2 // indirect
	github.com/klauspost/compress v1.20.4 // indirect
	github.com/nats-io/nkeys v0.4.17 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	github.com/synadia-io/orbit.go/jetstreamext v0.3.2 // indirect
	github.com/synadia-io/orbit.go/natsext v0.1.3 // indirect
	github.com/vmihailenco/msgpack/v5 v5.4.1 // indirect
	github.com/vmihailenco/tagparser/v2 v2.0.0 // indirect
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
	skein.dev/pkg/acp v0.0.0 // indirect
)

replace skein.dev/internal => ../../internal

replace skein.dev/pkg/acp => ../acp
