package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// TestConcurrentWritersNeverGoBackwards runs writers with different tokens
// against one key, as successive leaders racing with deposed ones would, and
// checks over real HTTP that the stored data never goes back to a lower
// token once a higher one was accepted. Refused writers keep trying, like a
// leader paused past its lease that has not noticed yet, to keep the store
// contended to the end.
func TestConcurrentWritersNeverGoBackwards(t *testing.T) {
	base, _ := startStore(t, t.TempDir())
	const writers, writes = 12, 12
	ctx := testCtx(t)
	var (
		acked   atomic.Uint64 // the highest token a Put has returned success for
		refused atomic.Int64
		wg      sync.WaitGroup
		errs    = make(chan error, writers*writes+1)
		done    = make(chan struct{})
		watcher sync.WaitGroup
	)
	watcher.Go(func() { errs <- watchNeverBackwards(ctx, base, "k", done, &acked) })
	// Term t begins once term t-1's leader is a few writes in, so every
	// handover meets an old leader in the middle of writing.
	started := make(chan struct{})
	close(started)
	for token := uint64(1); token <= writers; token++ {
		prev, next := started, make(chan struct{})
		started = next
		wg.Go(func() {
			<-prev
			for j := range writes {
				if j == 2 {
					close(next)
				}
				err := checkedPut(ctx, base, token, j, &acked)
				if errors.Is(err, ErrStale) {
					refused.Add(1)
				} else if err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(done)
	watcher.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	// Nothing can refuse the highest token, and only it may follow its writes.
	wantValue(t, base, "k", writers, writeValue(writers, writes-1))
	t.Logf("%d writers, %d writes each; %d refused", writers, writes, refused.Load())
}

func writeValue(token uint64, j int) string { return fmt.Sprintf("token %d write %d", token, j) }

// checkedPut puts one write and checks what the client alone can see: a Put
// sent after a higher token's Put returned must be refused, and the highest
// token of all is never refused. A refusal is returned wrapping ErrStale.
func checkedPut(ctx context.Context, base string, token uint64, j int, acked *atomic.Uint64) error {
	before := acked.Load()
	err := Put(ctx, base, "k", token, []byte(writeValue(token, j)))
	switch {
	case err == nil && token < before:
		return fmt.Errorf("token %d accepted after token %d was acknowledged", token, before)
	case err == nil:
		for cur := acked.Load(); cur < token && !acked.CompareAndSwap(cur, token); cur = acked.Load() {
		}
		return nil
	case errors.Is(err, ErrStale) && !strings.Contains(err.Error(), fmt.Sprintf("stale fencing token %d:", token)):
		return fmt.Errorf("refusal of token %d does not name it: %w", token, err)
	default:
		return err
	}
}

// watchNeverBackwards reads key until done and fails if the token of the
// stored value ever goes down, if a read started after a Put of a higher
// token returned finds a lower one, or if the value is not one its token
// wrote.
func watchNeverBackwards(ctx context.Context, base, key string, done <-chan struct{}, acked *atomic.Uint64) error {
	var last uint64
	for {
		select {
		case <-done:
			return nil
		default:
		}
		floor := acked.Load()
		value, token, err := Get(ctx, base, key)
		switch {
		case errors.Is(err, ErrNotFound) && floor == 0:
			continue
		case err != nil:
			return err
		case token < last:
			return fmt.Errorf("stored token went back from %d to %d (value %q)", last, token, value)
		case token < floor:
			return fmt.Errorf("read token %d after a Put of token %d had returned (value %q)", token, floor, value)
		case !strings.HasPrefix(string(value), fmt.Sprintf("token %d write ", token)):
			return fmt.Errorf("value %q stored under token %d", value, token)
		}
		last = token
	}
}
