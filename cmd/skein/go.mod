module skein.dev/cmd/skein

go 1.26.8
