module skein.dev/internal/workspace

go 1.26.8

require golang.org/x/sys v0.50.0

require skein.dev/pkg/events v0.0.0

replace skein.dev/pkg/events => ../../pkg/events

replace skein.dev/pkg/acp => ../../pkg/acp

replace skein.dev/internal/buildinfo => ../buildinfo

replace skein.dev/internal/natstest => ../natstest

replace skein.dev/internal/testutil => ../testutil
