package redislock

import (
	"log/slog"
	"testing"

	"go.uber.org/goleak"
)

// TestMain quiets the Redis client's own logging (the tests kill
// instances on purpose) and checks that no test leaves a goroutine
// behind: every lease's renewal loop ends with Unlock or a loss.
func TestMain(m *testing.M) {
	SetRedisLogger(slog.New(slog.DiscardHandler))
	goleak.VerifyTestMain(m)
}
