module skein.dev/pkg/acp

go 1.26.8

require (
	github.com/go-json-experiment/json v1.27.2
	github.com/google/go-cmp v0.7.0
	go.uber.org/goleak v1.3.0
)
