package agent

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if socket := os.Getenv(runHelperEnv); socket != "" {
		os.Exit(runHelper(socket)) // a `tenure run` started by TestKilledRunLeavesNoProcesses
	}
	goleak.VerifyTestMain(m)
}
