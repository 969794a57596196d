module skein.dev/testagent

go 1.26.8
