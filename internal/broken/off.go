//go:build !tenure_broken

package broken

// Enabled reports whether this binary was built with the tenure_broken tag.
const Enabled = false

// Is reports whether mode is switched on; always false in a normal build.
func Is(mode string) bool { return false }
