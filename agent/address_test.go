package agent

import (
	"net"
	"strings"
	"testing"
)

// TestAdvertiseHost: an unspecified bind address is never advertised; the
// host's single reachable address is, a single private one wins over
// public ones, a single IPv4 one among several of a kind, only the
// interfaces of a default route count where there is one, and none or
// several is an error naming --advertise.
func TestAdvertiseHost(t *testing.T) {
	parse := func(s []string) []net.IP {
		var out []net.IP
		for _, a := range s {
			out = append(out, net.ParseIP(a))
		}
		return out
	}
	ips := func(s ...string) func() (hostNet, error) {
		return func() (hostNet, error) { return hostNet{addrs: parse(s)}, nil }
	}
	// routed: the first n addresses are those of the default route's
	// interface.
	routed := func(n int, s ...string) func() (hostNet, error) {
		return func() (hostNet, error) { return hostNet{addrs: parse(s), routed: parse(s[:n])}, nil }
	}
	lo, ll, ll6 := "127.0.0.1", "169.254.1.2", "fe80::1"
	for _, tc := range []struct {
		name, bind, adv string
		addrs           func() (hostNet, error)
		want, err       string
	}{
		{"advertise wins", "0.0.0.0:7946", "10.0.0.9:7946", ips("10.0.0.1"), "10.0.0.9", ""},
		{"advertise without port", "0.0.0.0:7946", "10.0.0.9", ips(), "10.0.0.9", ""},
		{"specific bind", "10.0.0.5:7946", "", ips("10.0.0.1", "10.0.0.2"), "10.0.0.5", ""},
		{"one address", "0.0.0.0:7946", "", ips(lo, ll, ll6, "10.0.0.12"), "10.0.0.12", ""},
		{"ipv6 unspecified", "[::]:7946", "", ips(lo, "::1", "fd00::12"), "fd00::12", ""},
		{"private over public", "0.0.0.0:7946", "", ips("203.0.113.7", "192.168.1.4"), "192.168.1.4", ""},
		{"only public", "0.0.0.0:7946", "", ips(lo, "203.0.113.7"), "203.0.113.7", ""},
		{"dual-stack private", "0.0.0.0:7946", "", ips(lo, "fd20::5", "10.128.0.5", ll6), "10.128.0.5", ""},
		{"dual-stack public", "0.0.0.0:7946", "", ips(lo, "2001:db8::5", "203.0.113.5"), "203.0.113.5", ""},
		{"one address twice", "0.0.0.0:7946", "", ips("10.0.0.12", "10.0.0.12"), "10.0.0.12", ""},
		{"several private", "0.0.0.0:7946", "", ips("10.0.0.12", "172.17.0.1"), "", "several addresses (10.0.0.12, 172.17.0.1): give --advertise"},
		{"several private ipv6", "0.0.0.0:7946", "", ips("fd00::1", "fd00::2", "203.0.113.5"), "", "several addresses (fd00::1, fd00::2, 203.0.113.5)"},
		{"several public", "0.0.0.0:7946", "", ips("203.0.113.5", "198.51.100.5"), "", "several addresses"},
		{"none", "0.0.0.0:7946", "", ips(lo, ll6), "", "no address other agents could reach"},
		{"docker bridge beside the route", "0.0.0.0:7946", "", routed(2, "10.0.0.12", ll6, "172.17.0.1", lo), "10.0.0.12", ""},
		{"public route, private bridge", "0.0.0.0:7946", "", routed(1, "203.0.113.7", "172.17.0.1"), "203.0.113.7", ""},
		{"several on the route", "0.0.0.0:7946", "", routed(2, "10.0.0.12", "10.0.0.13", "172.17.0.1"), "", "several addresses (10.0.0.12, 10.0.0.13)"},
		{"route on a link-local interface", "0.0.0.0:7946", "", routed(1, ll, "10.0.0.12"), "10.0.0.12", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Config{BindAddr: tc.bind, AdvertiseAddr: tc.adv}.advertiseHost(tc.addrs)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "--advertise") {
					t.Fatalf("got %q, %v; want an error with %q naming --advertise", got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
