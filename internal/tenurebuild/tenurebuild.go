// Package tenurebuild builds this module's programs the way `make build`
// builds the release binary, so that the tests and benchmarks that run
// real agent processes run what ships.
//
// A release build is static (CGO_ENABLED=0): it needs no C library on the
// hosts it is copied to, where a binary linked against a newer glibc than
// theirs would not start. It also leaves out urfave/cli's Markdown and
// man-page generators (the urfave_cli_no_docs tag), which tenure does not
// use: their package initialisation cost every start of the binary, each
// agent and each CLI command, a few milliseconds. Together the two take
// about a fifth off the CPU `tenure --version` needs (docs/BENCHMARKS.md).
// Without cgo, os/user reads /etc/group itself: --socket-group takes a
// group named there or a numeric ID.
//
// The Makefile's build target sets the same two; keep them in step.
package tenurebuild

import (
	"context"
	"os"
	"os/exec"
	"strings"
)

// Tags are the build tags of a release build.
const Tags = "urfave_cli_no_docs"

// Command returns the go build command of a release build of pkgs, run in
// dir (a directory of the module), that writes to out (a file, or a
// directory ending in a separator for several programs), with the build
// tags extra added to Tags. The caller runs it.
func Command(ctx context.Context, dir, out string, extra []string, pkgs ...string) *exec.Cmd {
	tags := strings.Join(append([]string{Tags}, extra...), ",")
	args := append([]string{"build", "-tags", tags, "-o", out}, pkgs...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	return cmd
}
