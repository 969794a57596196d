module skein.dev/pkg/acp

go 1.26.8
