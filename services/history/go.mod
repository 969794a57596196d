module skein.dev/services/history

go 1.26.8
