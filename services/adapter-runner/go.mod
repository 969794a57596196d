module skein.dev/services/adapter-runner

go 1.26.8
