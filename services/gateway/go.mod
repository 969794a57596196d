module skein.dev/services/gateway

go 1.26.8
