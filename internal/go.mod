module skein.dev/internal

go 1.26.8

require (
	github.com/nats-io/nats-server/v2 v2.15.3
	github.com/nats-io/nats.go v1.55.0
	github.com/nats-io/nkeys v0.4.17
	github.com/prometheus/client_golang v1.25.0
	github.com/prometheus/client_model v0.6.3
	go.uber.org/goleak v1.3.0
	golang.org/x/sys v0.50.0
	skein.dev/pkg/events v0.0.0
	skein.dev/services/adapter-runner v0.0.0
	skein.dev/services/gateway v0.0.0
	skein.dev/services/history v0.0.0
	skein.dev/services/notify v0.0.0
	skein.dev/services/session v0.0.0-00010101000000-000000000000
	skein.dev/testagent v0.0.0
)

require (
	github.com/antithesishq/antithesis-sdk-go v0.9.0-default-no-op // indirect
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/coder/websocket v1.8.15 // indirect
	github.com/elastic/go-seccomp-bpf v1.6.0 // indirect
	github.com/go-json-experiment/json v1.27.2 // indirect
	github.com/google/btree v1.1.3 // indirect
	github.com/google/go-tpm v0.9.8 // indirect
	github.com/klauspost/compress v1.20.4 // indirect
	github.com/kylelemons/godebug v1.1.0 // indirect
	github.com/landlock-lsm/go-landlock v0.11.2 // indirect
	github.com/minio/highwayhash v1.0.4 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/nats-io/jwt/v2 v2.8.3 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	github.com/prometheus/common v0.72.0 // indirect
	github.com/prometheus/procfs v0.22.0 // indirect
	github.com/synadia-io/orbit.go/jetstreamext v0.3.2 // indirect
	github.com/synadia-io/orbit.go/natsext v0.1.3 // indirect
	github.com/vmihailenco/msgpack/v5 v5.4.1 // indirect
	github.com/vmihailenco/tagparser/v2 v2.0.0 // indirect
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/time v0.16.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
	kernel.org/pub/linux/libs/security/libcap/psx v1.2.78 // indirect
	skein.dev/pkg/acp v0.0.0 // indirect
)

replace skein.dev/pkg/events => ../pkg/events

replace skein.dev/pkg/acp => ../pkg/acp

replace skein.dev/services/adapter-runner => ../services/adapter-runner

replace skein.dev/services/history => ../services/history

replace skein.dev/services/session => ../services/session

replace skein.dev/services/gateway => ../services/gateway

replace skein.dev/pkg/client => ../pkg/client

replace skein.dev/testagent => ../testagent

require skein.dev/pkg/client v0.0.0
replace skein.dev/services/notify => ../services/notify
