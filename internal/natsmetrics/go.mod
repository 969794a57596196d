module skein.dev/internal/natsmetrics

go 1.26.8

require (
	github.com/nats-io/nats.go v1.55.0
	github.com/prometheus/client_golang v1.25.0
	github.com/prometheus/client_model v0.6.3
	skein.dev/internal/natstest v0.0.0
	skein.dev/internal/testutil v0.0.0
	skein.dev/pkg/events v0.0.0
)

replace skein.dev/pkg/events => ../../pkg/events

replace skein.dev/pkg/acp => ../../pkg/acp

replace skein.dev/internal/buildinfo => ../buildinfo

replace skein.dev/internal/natstest => ../natstest

replace skein.dev/internal/testutil => ../testutil
