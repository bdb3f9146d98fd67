//go:build !unix

package agent

import "os"

// lockDataDir does nothing where flock is not available.
func lockDataDir(dir string) (*os.File, error) { return nil, nil }
