module skein.dev/pkg/client

go 1.26.8

require (
	github.com/nats-io/nats.go v1.55.0
	skein.dev/pkg/events v0.0.0
)

replace skein.dev/pkg/events => ../events

replace skein.dev/internal/buildinfo => ../../internal/buildinfo

replace skein.dev/internal/testutil => ../../internal/testutil
