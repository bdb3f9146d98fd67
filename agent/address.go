package agent

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
)

// advertiseHost is the host other agents use to reach this one, for gossip
// and for peer messages: the --advertise host if given, else the gossip
// bind host if it is a specific address, else the one address this host
// has (see pickAdvertiseHost). An unspecified address (0.0.0.0, ::) is
// never advertised: others could not reach it.
func (c Config) advertiseHost(host func() (hostNet, error)) (string, error) {
	if adv := c.AdvertiseAddr; adv != "" {
		if h, _, err := net.SplitHostPort(adv); err == nil {
			return h, nil
		}
		return adv, nil
	}
	if h, _, err := net.SplitHostPort(c.BindAddr); err == nil && h != "" && !net.ParseIP(h).IsUnspecified() {
		return h, nil
	}
	hn, err := host()
	if err != nil {
		return "", fmt.Errorf("agent: list this host's addresses to advertise (or give --advertise HOST): %w", err)
	}
	return pickAdvertiseHost(hn)
}

// hostNet is what pickAdvertiseHost knows of this host's network.
type hostNet struct {
	// addrs are the addresses of every interface.
	addrs []net.IP
	// routed are the addresses of the interfaces that hold a default
	// route: none where there is no default route, or routes are not read
	// (off Linux).
	routed []net.IP
}

// pickAdvertiseHost chooses the address to advertise among a host's
// interface addresses, as memberlist does for gossip: the addresses of
// the interfaces that hold a default route count, or every interface's
// where none does (so bridges such as Docker's do not count on a host
// that routes through another interface); among them loopback,
// link-local and multicast addresses never count. Private addresses (RFC
// 1918, or IPv6 unique local ones) win over public ones, and within
// either kind a single address wins, else a single IPv4 address (a
// dual-stack host: 10.0.0.5 and fd20::5, or 203.0.113.5 and
// 2001:db8::5). None, or several, is an error that names --advertise.
func pickAdvertiseHost(h hostNet) (string, error) {
	if len(h.routed) > 0 {
		host, err := pickAmong(h.routed)
		if !errors.Is(err, errNoAddress) {
			return host, err
		}
	}
	return pickAmong(h.addrs)
}

// errNoAddress is pickAmong's error for a list with no usable address.
var errNoAddress = errors.New("agent: this host has no address other agents could reach it at (only loopback or link-local): give --advertise HOST, or bind a specific address with --bind")

// pickAmong applies pickAdvertiseHost's rule to one list of addresses.
func pickAmong(ips []net.IP) (string, error) {
	var usable, usable4, private, private4 []string
	for _, ip := range ips {
		if ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() || ip.IsMulticast() || ip.IsUnspecified() {
			continue
		}
		if slices.Contains(usable, ip.String()) {
			continue // one address on two interfaces
		}
		usable = append(usable, ip.String())
		if ip.To4() != nil {
			usable4 = append(usable4, ip.String())
		}
		if ip.IsPrivate() {
			private = append(private, ip.String())
			if ip.To4() != nil {
				private4 = append(private4, ip.String())
			}
		}
	}
	choose := func(all, v4 []string) (string, bool) {
		if len(all) == 1 {
			return all[0], true
		}
		if len(v4) == 1 {
			return v4[0], true
		}
		return "", false
	}
	if len(usable) == 0 {
		return "", errNoAddress
	}
	if len(private) > 0 {
		if host, ok := choose(private, private4); ok {
			return host, nil
		}
	} else if host, ok := choose(usable, usable4); ok {
		return host, nil
	}
	return "", fmt.Errorf("agent: this host has several addresses (%s): give --advertise HOST to say which one other agents should use",
		strings.Join(usable, ", "))
}

// interfaceAddrs lists this host's interface addresses, and those of the
// interfaces that hold a default route.
func interfaceAddrs() (hostNet, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return hostNet{}, err
	}
	routes, err := defaultRouteInterfaces()
	if err != nil {
		return hostNet{}, fmt.Errorf("read default routes: %w", err)
	}
	var h hostNet
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp == 0 {
			continue
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			return hostNet{}, fmt.Errorf("addresses of %s: %w", ifc.Name, err)
		}
		for _, a := range addrs {
			n, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			h.addrs = append(h.addrs, n.IP)
			if routes[ifc.Name] {
				h.routed = append(h.routed, n.IP)
			}
		}
	}
	return h, nil
}
