package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// readJournalFile parses a journal written by an agent.
func readJournalFile(t *testing.T, path string) []JournalEntry {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []JournalEntry
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e JournalEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("journal line %q: %v", sc.Text(), err)
		}
		out = append(out, e)
	}
	return out
}

// TestJournalRecordsOwnLeadership: three agents journal their leadership.
// The leader's journal says it started, led one epoch with a lease ending
// about one TTL (less the drift margin) after it was granted, extended it
// with later deadlines, and ended the term when it resigned; a follower's
// journal holds only its start. Every wall-clock deadline lies after the
// line's own time and within one TTL of it.
func TestJournalRecordsOwnLeadership(t *testing.T) {
	c := newTestCluster(t)
	c.expect = 3
	journals := map[string]string{}
	for i := 1; i <= 3; i++ {
		cfg := c.config(fmt.Sprintf("n%d", i), uint64(i))
		cfg.Journal = filepath.Join(c.dir, cfg.Name+".journal")
		journals[cfg.Name] = cfg.Journal
		c.start(cfg)
	}
	epoch := c.waitLeader("n3", 20*time.Second)
	time.Sleep(testTTL) // a few renewals
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.agents["n3"].Resign(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, func() error {
		for _, e := range readJournalFile(t, journals["n3"]) {
			if e.Event == JournalEnd && e.Epoch == epoch {
				return nil
			}
		}
		return fmt.Errorf("no end of epoch %d in n3's journal", epoch)
	})
	entries := readJournalFile(t, journals["n3"])
	if entries[0].Event != JournalStart || entries[0].Node != "n3" {
		t.Fatalf("first line %+v, want n3's start", entries[0])
	}
	var lead, extends int
	var lastUntil int64
	for _, e := range entries[1:] {
		if e.Epoch != epoch {
			continue // a later term after the resign hold, if any
		}
		switch e.Event {
		case JournalLead:
			lead++
		case JournalExtend:
			extends++
			if e.Until <= lastUntil {
				t.Fatalf("extend to %d after a deadline of %d: %+v", e.Until, lastUntil, entries)
			}
		case JournalEnd:
			if lead != 1 || extends == 0 {
				t.Fatalf("term ended after %d leads and %d extends: %+v", lead, extends, entries)
			}
			return
		}
		if e.Until <= e.T || e.Until > e.T+int64(testTTL) {
			t.Fatalf("deadline %v after the line's time, want within (0, %v]: %+v", time.Duration(e.Until-e.T), testTTL, e)
		}
		lastUntil = e.Until
	}
	t.Fatalf("no end of epoch %d: %+v", epoch, entries)
}

// TestJournalOfFollowerHoldsOnlyStart: a node that never leads journals
// its start and nothing else.
func TestJournalOfFollowerHoldsOnlyStart(t *testing.T) {
	c := newTestCluster(t)
	c.expect = 2
	cfg := c.config("n1", 1)
	cfg.Journal = filepath.Join(c.dir, "n1.journal")
	c.start(cfg)
	c.start(c.config("n2", 2))
	c.waitLeader("n2", 20*time.Second)
	c.halt("n1")
	entries := readJournalFile(t, cfg.Journal)
	if len(entries) != 1 || entries[0].Event != JournalStart {
		t.Fatalf("follower's journal: %+v, want only its start", entries)
	}
}
