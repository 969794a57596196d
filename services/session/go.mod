module skein.dev/services/session

go 1.26.8
