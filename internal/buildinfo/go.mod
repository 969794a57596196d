module skein.dev/internal/buildinfo

go 1.26.8
