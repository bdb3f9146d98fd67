package agent

import (
	"net"
	"strings"
	"testing"
)

// TestAdvertiseHost: an unspecified bind address is never advertised; the
// host's single reachable address is, a single private one wins over
// public ones, and none or several is an error naming --advertise.
func TestAdvertiseHost(t *testing.T) {
	ips := func(s ...string) func() ([]net.IP, error) {
		return func() ([]net.IP, error) {
			var out []net.IP
			for _, a := range s {
				out = append(out, net.ParseIP(a))
			}
			return out, nil
		}
	}
	lo, ll, ll6 := "127.0.0.1", "169.254.1.2", "fe80::1"
	for _, tc := range []struct {
		name, bind, adv string
		addrs           func() ([]net.IP, error)
		want, err       string
	}{
		{"advertise wins", "0.0.0.0:7946", "10.0.0.9:7946", ips("10.0.0.1"), "10.0.0.9", ""},
		{"advertise without port", "0.0.0.0:7946", "10.0.0.9", ips(), "10.0.0.9", ""},
		{"specific bind", "10.0.0.5:7946", "", ips("10.0.0.1", "10.0.0.2"), "10.0.0.5", ""},
		{"one address", "0.0.0.0:7946", "", ips(lo, ll, ll6, "10.0.0.12"), "10.0.0.12", ""},
		{"ipv6 unspecified", "[::]:7946", "", ips(lo, "::1", "fd00::12"), "fd00::12", ""},
		{"private over public", "0.0.0.0:7946", "", ips("203.0.113.7", "192.168.1.4"), "192.168.1.4", ""},
		{"only public", "0.0.0.0:7946", "", ips(lo, "203.0.113.7"), "203.0.113.7", ""},
		{"several private", "0.0.0.0:7946", "", ips("10.0.0.12", "172.17.0.1"), "", "several addresses (10.0.0.12, 172.17.0.1): give --advertise"},
		{"none", "0.0.0.0:7946", "", ips(lo, ll6), "", "no address other agents could reach"},
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
