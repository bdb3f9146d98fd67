package agent

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/tenurehq/tenure/internal/fsutil"
)

// maxInstanceFile bounds what is read of the instance file.
const maxInstanceFile = 64

// openInstance draws this process's instance, reads the one of the
// process that ran on the data dir before it (zero when none is known),
// and records the new one in its place. Voters promising this node's
// name to the earlier process grant this one as its restart; a process
// that cannot name the earlier one (its data dir lost, or the file
// unwritable last time) waits for that promise to end, as every other
// node does. Neither is fatal: the agent goes on, and says so.
func (a *Agent) openInstance() {
	a.instance = rand.Uint64() | 1 // never zero: zero names no instance
	path := filepath.Join(a.cfg.DataDir, instanceFile)
	prev, err := readInstance(path)
	if err != nil {
		a.log.Warn("the previous run's instance is unknown: voters that still promise it this node's term refuse it until that promise ends",
			"file", path, "err", err)
	}
	a.previous = prev
	data := []byte(strconv.FormatUint(a.instance, 10) + "\n")
	if err := fsutil.WriteFileAtomic(path, data, 0o600); err != nil {
		a.log.Warn("cannot record this run's instance: after a crash, the next run waits for the voters' promises to this one to end",
			"file", path, "err", err)
	}
}

// readInstance reads an instance file: zero and no error when there is
// none.
func readInstance(path string) (uint64, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read the instance file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxInstanceFile))
	if err != nil {
		return 0, fmt.Errorf("read the instance file: %w", err)
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("read the instance file: %w", err)
	}
	return v, nil
}
