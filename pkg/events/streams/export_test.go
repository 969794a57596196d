package streams

import "github.com/nats-io/nats.go/jetstream"

// BucketConfigs exposes the KV buckets' configurations to the external tests,
// which hold their backing streams equal to what nats.go makes of them.
func BucketConfigs(o Options) []jetstream.KeyValueConfig { return bucketConfigs(o.withDefaults()) }
