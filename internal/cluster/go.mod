module skein.dev/internal/cluster

go 1.26.8
