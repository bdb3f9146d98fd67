package leasing_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/tenurehq/tenure/leasing"
)

// register is a resource that holds one value, written only by the current
// leader. Its lock covers the fence check and the write together.
type register struct {
	mu    sync.Mutex
	fence leasing.Fence
	value string
}

// Write admits token then applies the write, both under r.mu.
func (r *register) Write(token uint64, value string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.fence.Admit(token); err != nil {
		return err // the writer no longer leads: change nothing
	}
	r.value = value
	return nil
}

func ExampleFence() {
	var r register
	fmt.Println(r.Write(33, "leader of term 33"))
	fmt.Println(r.Write(34, "leader of term 34"))
	fmt.Println(r.Write(34, "leader of term 34, again")) // equal: the same term
	err := r.Write(33, "leader of term 33, back from a long GC pause")
	fmt.Println(err)
	fmt.Println(errors.Is(err, leasing.ErrStaleToken), r.value)
	// Output:
	// <nil>
	// <nil>
	// <nil>
	// leasing: stale fencing token: 33 < 34 (highest admitted)
	// true leader of term 34, again
}

func ExampleDurableFence() {
	dir, err := os.MkdirTemp("", "fence-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "fence")

	f, err := leasing.OpenDurableFence(path)
	if err != nil {
		panic(err)
	}
	fmt.Println(f.Admit(7)) // on disk before Admit returns

	// The resource restarts: the new process still refuses term 6.
	f, err = leasing.OpenDurableFence(path)
	if err != nil {
		panic(err)
	}
	fmt.Println(f.Highest())
	fmt.Println(f.Admit(6))
	// Output:
	// <nil>
	// 7
	// leasing: stale fencing token: 6 < 7 (highest admitted)
}

func ExampleKeyedFence() {
	var k leasing.KeyedFence // one fence per shard, each with its own leader
	fmt.Println(k.Admit("shard-a", 12))
	fmt.Println(k.Admit("shard-b", 3)) // shard-b's epochs are its own
	fmt.Println(k.Admit("shard-a", 11))
	// Output:
	// <nil>
	// <nil>
	// leasing: stale fencing token for key "shard-a": 11 < 12 (highest admitted)
}
