package agent

import (
	"os"
	"testing"

	"github.com/tenurehq/tenure/internal/testwait"
)

func TestMain(m *testing.M) {
	if socket := os.Getenv(runHelperEnv); socket != "" {
		os.Exit(runHelper(socket)) // a `tenure run` started by TestKilledRunLeavesNoProcesses
	}
	testwait.VerifyTestMain(m)
}
