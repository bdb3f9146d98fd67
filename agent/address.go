package agent

import (
	"fmt"
	"net"
	"strings"
)

// advertiseHost is the host other agents use to reach this one, for gossip
// and for peer messages: the --advertise host if given, else the gossip
// bind host if it is a specific address, else the one address this host
// has (see pickAdvertiseHost). An unspecified address (0.0.0.0, ::) is
// never advertised: others could not reach it.
func (c Config) advertiseHost(addrs func() ([]net.IP, error)) (string, error) {
	if adv := c.AdvertiseAddr; adv != "" {
		if h, _, err := net.SplitHostPort(adv); err == nil {
			return h, nil
		}
		return adv, nil
	}
	if h, _, err := net.SplitHostPort(c.BindAddr); err == nil && h != "" && !net.ParseIP(h).IsUnspecified() {
		return h, nil
	}
	ips, err := addrs()
	if err != nil {
		return "", fmt.Errorf("agent: list this host's addresses to advertise: %w", err)
	}
	return pickAdvertiseHost(ips)
}

// pickAdvertiseHost chooses the address to advertise among a host's
// interface addresses, as memberlist does for gossip: loopback, link-local
// and multicast addresses never count; a single private address (RFC 1918,
// or an IPv6 unique local address) wins; otherwise the single address
// left. None, or several, is an error that names --advertise.
func pickAdvertiseHost(ips []net.IP) (string, error) {
	var usable, private []string
	for _, ip := range ips {
		if ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() || ip.IsMulticast() || ip.IsUnspecified() {
			continue
		}
		usable = append(usable, ip.String())
		if ip.IsPrivate() {
			private = append(private, ip.String())
		}
	}
	switch {
	case len(private) == 1:
		return private[0], nil
	case len(private) == 0 && len(usable) == 1:
		return usable[0], nil
	case len(usable) == 0:
		return "", fmt.Errorf("agent: this host has no address other agents could reach it at (only loopback or link-local): give --advertise HOST, or bind a specific address with --bind")
	}
	return "", fmt.Errorf("agent: this host has several addresses (%s): give --advertise HOST to say which one other agents should use",
		strings.Join(usable, ", "))
}

// interfaceIPs lists the addresses of this host's interfaces.
func interfaceIPs() ([]net.IP, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	var ips []net.IP
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			ips = append(ips, n.IP)
		}
	}
	return ips, nil
}
