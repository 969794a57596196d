package rpc

import (
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"skein.dev/internal/buildinfo"
)

// AddService is micro.AddService for Skein's services: when cfg.Version is
// empty it is set to buildinfo.ServiceVersion, so that every service reports the
// version of the binary it runs in (nats micro info, $SRV.INFO) and no
// service writes a version literal. Everything else in cfg is passed on
// unchanged; errors are micro.AddService's.
func AddService(nc *nats.Conn, cfg micro.Config) (micro.Service, error) {
	if cfg.Version == "" {
		cfg.Version = buildinfo.ServiceVersion()
	}
	return micro.AddService(nc, cfg)
}
