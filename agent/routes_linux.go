package agent

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Route flags of the kernel's route tables (linux/route.h).
const (
	rtfUp     = 0x0001
	rtfReject = 0x0200
)

// defaultRouteInterfaces names the interfaces that hold an IPv4 or IPv6
// default route in this process's network namespace, from the kernel's
// route tables in /proc/net. A table that is missing (IPv6 turned off)
// counts as no route.
func defaultRouteInterfaces() (map[string]bool, error) {
	return readDefaultRoutes("/proc/net/route", "/proc/net/ipv6_route")
}

// readDefaultRoutes reads the interfaces of default routes from an IPv4
// and an IPv6 route table in the formats of /proc/net.
func readDefaultRoutes(v4, v6 string) (map[string]bool, error) {
	out := map[string]bool{}
	// IPv4: Iface Destination Gateway Flags RefCnt Use Metric Mask ...,
	// after a header line; addresses in hex.
	if err := scanRoutes(v4, true, func(f []string) {
		if len(f) >= 8 && f[1] == "00000000" && f[7] == "00000000" && routeUp(f[3]) {
			out[f[0]] = true
		}
	}); err != nil {
		return nil, err
	}
	// IPv6: destination, its prefix length, source, its prefix length,
	// next hop, metric, references, use, flags, interface; no header.
	if err := scanRoutes(v6, false, func(f []string) {
		if len(f) >= 10 && strings.Trim(f[0], "0") == "" && f[1] == "00" && routeUp(f[8]) && f[9] != "lo" {
			out[f[9]] = true
		}
	}); err != nil {
		return nil, err
	}
	return out, nil
}

// routeUp reports whether hex route flags say the route is up and not a
// reject (unreachable) route.
func routeUp(flags string) bool {
	v, err := strconv.ParseUint(flags, 16, 32)
	return err == nil && v&rtfUp != 0 && v&rtfReject == 0
}

// scanRoutes calls line with the fields of each route in the table at
// path, skipping a header line if header is set.
func scanRoutes(path string, header bool, line func([]string)) error {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for first := true; sc.Scan(); first = false {
		if first && header {
			continue
		}
		line(strings.Fields(sc.Text()))
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	return nil
}
