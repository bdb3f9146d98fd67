//go:build nemesis

package nemesis

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/tenurehq/tenure/internal/tenurebuild"
)

// Binaries are the programs a cluster runs, built from this tree.
type Binaries struct {
	Tenure string // cmd/tenure: the agent and `tenure run`
	Store  string // examples/fenced-store
	Writer string // test/nemesis/writer
	// Broken: built with the tenure_broken tag, so TENURE_BROKEN is read.
	Broken bool
}

// Build builds the three programs of the module this package belongs to
// into dir as a release build (internal/tenurebuild), with the
// tenure_broken tag if broken.
func Build(dir string, broken bool) (Binaries, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return Binaries{}, fmt.Errorf("nemesis: go env GOMOD: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(out)))
	var tags []string
	if broken {
		tags = append(tags, "tenure_broken")
	}
	cmd := tenurebuild.Command(context.Background(), root, dir+string(filepath.Separator), tags,
		"./cmd/tenure", "./examples/fenced-store", "./test/nemesis/writer")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return Binaries{}, fmt.Errorf("nemesis: go %s: %w: %s", strings.Join(cmd.Args[1:], " "), err, stderr.Bytes())
	}
	return Binaries{Tenure: filepath.Join(dir, "tenure"), Store: filepath.Join(dir, "fenced-store"),
		Writer: filepath.Join(dir, "writer"), Broken: broken}, nil
}
