//go:build tenure_broken

package broken

import (
	"os"
	"slices"
	"strings"
)

// Enabled reports whether this binary was built with the tenure_broken tag.
const Enabled = true

var modes = strings.Split(os.Getenv("TENURE_BROKEN"), ",")

// Is reports whether mode is listed in TENURE_BROKEN.
func Is(mode string) bool { return slices.Contains(modes, mode) }
