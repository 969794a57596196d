package webhook

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"

	"skein.dev/pkg/events"
)

// refused are the ranges a webhook may not reach unless the operator
// allows them: what is not the public internet. Loopback, RFC 1918 and
// unique-local (fc00::/7) private networks, link-local (169.254.0.0/16 and
// fe80::/10: the cloud metadata services at 169.254.169.254 and
// fd00:ec2::254 are among them), shared address space (100.64.0.0/10,
// where Alibaba's metadata is), "this network", multicast and the
// reserved and documentation ranges.
var refused = func() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range []string{
		"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
		"192.0.0.0/24", "192.0.2.0/24", "192.168.0.0/16", "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24",
		"224.0.0.0/4", "240.0.0.0/4",
		"::/128", "::1/128", "64:ff9b::/96", "64:ff9b:1::/48", "100::/64", "2001:db8::/32", "fc00::/7", "fe80::/10", "ff00::/8",
	} {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}()

// Guard decides which addresses webhooks may reach: every public address,
// and the refused ranges the operator allows.
type Guard struct {
	Allow []netip.Prefix
}

// ParseAllow parses a comma-separated list of CIDRs ("127.0.0.0/8,::1/128").
func ParseAllow(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, fmt.Errorf("webhook allow %q: %w", f, err)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// Loopback are the loopback ranges, which skein dev allows.
var Loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}

// Permits reports whether a webhook may reach ip.
func (g Guard) Permits(ip netip.Addr) bool {
	ip = ip.Unmap()
	for _, p := range g.Allow {
		if p.Contains(ip) {
			return true
		}
	}
	if !ip.IsValid() || ip.Zone() != "" {
		return false
	}
	for _, p := range refused {
		if p.Contains(ip) {
			return false
		}
	}
	return true
}

// Check resolves the URL's host and refuses it (CodeInvalidRequest) when
// any of its addresses may not be reached: the check at registration. A
// name that does not resolve is refused too. The dialer checks again at
// each connection (Control), so a name that later resolves elsewhere
// (DNS rebinding) reaches nothing it may not.
func (g Guard) Check(ctx context.Context, r *net.Resolver, rawURL string) error {
	u, err := ParseURL(rawURL)
	if err != nil {
		return err
	}
	host := u.Hostname()
	var addrs []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{ip}
	} else {
		if r == nil {
			r = net.DefaultResolver
		}
		if addrs, err = r.LookupNetIP(ctx, "ip", host); err != nil || len(addrs) == 0 {
			return events.Errorf(events.CodeInvalidRequest, "url host %q does not resolve", events.Truncate(host, 255))
		}
	}
	for _, ip := range addrs {
		if !g.Permits(ip) {
			return events.Errorf(events.CodeInvalidRequest, "url host %q resolves to %s, a private, loopback or link-local address webhooks may not reach (the operator allows ranges with --gateway.webhook-allow)", events.Truncate(host, 255), ip)
		}
	}
	return nil
}

// Control is a net.Dialer Control function that refuses to connect to an
// address the guard does not permit: it sees the address the dialer is
// about to connect to, after resolution, so it holds for every connection.
func (g Guard) Control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("webhook dial %q: %w", address, err)
	}
	if !g.Permits(ap.Addr()) {
		return fmt.Errorf("%w: %s", ErrRefusedAddress, ap.Addr())
	}
	return nil
}

// ErrRefusedAddress is the error of a connection Control refused.
var ErrRefusedAddress = fmt.Errorf("webhook address not allowed")
