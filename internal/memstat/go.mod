module skein.dev/internal/memstat

go 1.26.8
