module skein.dev/pkg/acpwire

go 1.26.8
