package cluster

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"skein.dev/internal/edgeusers"
)

// copyConf copies Options.ConfDir's configuration files to <dir>/nats,
// which the nodes run: skein provision runner writes the edge runners'
// users into the accounts.conf there, never into the repository's. A
// cluster started again on its directory (make cluster after make
// cluster-stop) keeps the edge runners it had, in the configuration as it
// is now.
func (c *Cluster) copyConf() error {
	dst := c.confDir()
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return err
	}
	var kept []edgeusers.Runner
	if old, err := os.ReadFile(filepath.Join(dst, "accounts.conf")); err == nil {
		if kept, err = edgeusers.Read(old); err != nil {
			return fmt.Errorf("the edge runners of %s: %w", filepath.Join(dst, "accounts.conf"), err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	files, err := filepath.Glob(filepath.Join(c.opts.ConfDir, "*.conf"))
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("no configuration files in %s", c.opts.ConfDir)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		if filepath.Base(f) == "accounts.conf" && len(kept) > 0 {
			if b, err = edgeusers.Write(b, kept); err != nil {
				return fmt.Errorf("%s: %w", f, err)
			}
		}
		if err := os.WriteFile(filepath.Join(dst, filepath.Base(f)), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}
