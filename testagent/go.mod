module skein.dev/testagent

go 1.26.8

require (
	skein.dev/internal/testutil v0.0.0
	github.com/google/go-cmp v0.7.0
	go.uber.org/goleak v1.3.0
	golang.org/x/sys v0.50.0
)

replace skein.dev/internal/testutil => ../internal/testutil
