//go:build !linux

package agent

// defaultRouteInterfaces reports no default routes where the route tables
// are not read: pickAdvertiseHost then considers every interface.
func defaultRouteInterfaces() (map[string]bool, error) { return nil, nil }
