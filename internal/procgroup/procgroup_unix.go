//go:build unix

// Package procgroup starts, signals and stops whole process groups, so that
// a hook's or a `tenure run` child's own children are stopped with it.
package procgroup

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"
)

// Poll bounds for WaitGone.
const (
	groupPollMin = 2 * time.Millisecond
	groupPollMax = 50 * time.Millisecond
)

// Supported reports whether this system has process groups.
const Supported = true

// Attr makes a command start in a process group of its own, whose ID
// is its PID.
func Attr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// AttrDying is Attr, and on Linux also has the kernel SIGKILL the command
// when the thread that started it dies (Pdeathsig): see pdeathsig_linux.go
// for why SIGKILL and how the caller must hold its thread.
func AttrDying() *syscall.SysProcAttr {
	a := Attr()
	setPdeathsig(a)
	return a
}

// Signal sends sig to every process in group pgid. A group that no
// longer exists is not an error.
func Signal(pgid int, sig syscall.Signal) error {
	err := syscall.Kill(-pgid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// Stop stops process group pgid: SIGTERM (and SIGCONT, so stopped
// members see it), then SIGKILL once grace has passed, or abort is closed,
// with any member still running. It reports whether SIGKILL was sent.
func Stop(pgid int, grace time.Duration, abort <-chan struct{}) (killed bool) {
	_ = Signal(pgid, syscall.SIGTERM)
	_ = Signal(pgid, syscall.SIGCONT)
	if WaitGone(pgid, grace, abort) {
		return false
	}
	Kill(pgid, grace)
	return true
}

// Kill SIGKILLs process group pgid and waits, up to d, until no member
// runs: death is prompt, except for a process in uninterruptible sleep,
// which dies only when it wakes.
func Kill(pgid int, d time.Duration) {
	_ = Signal(pgid, syscall.SIGKILL)
	WaitGone(pgid, d, nil)
}

// WaitGone polls until no member of group pgid runs (true), or until d
// has passed or abort is closed (false).
func WaitGone(pgid int, d time.Duration, abort <-chan struct{}) bool {
	deadline := time.Now().Add(d)
	poll := groupPollMin
	for Running(pgid) {
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		t := time.NewTimer(min(poll, left))
		select {
		case <-t.C:
		case <-abort:
			t.Stop()
			return false
		}
		poll = min(2*poll, groupPollMax)
	}
	return true
}

// Running reports whether a process of group pgid still runs. Zombies
// do not count: an orphan whose reaper is slow (or absent, as for PID 1 in
// some containers) is dead all the same.
func Running(pgid int) bool {
	if errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH) {
		return false
	}
	running, ok := procGroupRunning(pgid)
	return running || !ok
}

// procGroupRunning scans /proc for a live member of group pgid; ok is false
// when /proc cannot be read (not Linux), and the caller must assume one.
func procGroupRunning(pgid int) (running, ok bool) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return false, false
	}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if state, pg, ok := procStat(e.Name()); ok && pg == pgid && state != 'Z' && state != 'X' {
			return true, true
		}
	}
	return false, true
}

// procStat reads a process's state and process group from /proc/PID/stat.
func procStat(pid string) (state byte, pgid int, ok bool) {
	st, ok := readStat(pid)
	return st.state, st.pgid, ok
}

// stat is what tenure reads of /proc/PID/stat.
type stat struct {
	state      byte
	ppid, pgid int
}

// readStat reads /proc/PID/stat.
func readStat(pid string) (stat, bool) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return stat{}, false
	}
	// "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return stat{}, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 3 || len(f[0]) != 1 {
		return stat{}, false
	}
	ppid, err1 := strconv.Atoi(string(f[1]))
	pg, err2 := strconv.Atoi(string(f[2]))
	return stat{state: f[0][0], ppid: ppid, pgid: pg}, err1 == nil && err2 == nil
}

// Attribute checks that process group pgid belongs to process parent of
// user uid: its leader (the process whose PID is pgid) is alive, leads the
// group, is a child of parent and runs as uid, and the group is not this
// process's own. It needs /proc (Linux); elsewhere it fails, so a caller
// never signals a group it could not attribute.
func Attribute(pgid, parent, uid int) error {
	if pgid <= 1 || pgid == syscall.Getpgrp() {
		return fmt.Errorf("procgroup: group %d is not a group tenure may stop", pgid)
	}
	pid := strconv.Itoa(pgid)
	st, ok := readStat(pid)
	switch {
	case !ok || st.state == 'Z' || st.state == 'X':
		return fmt.Errorf("procgroup: group %d has no live leader", pgid)
	case st.pgid != pgid:
		return fmt.Errorf("procgroup: process %d does not lead a process group (its group is %d)", pgid, st.pgid)
	case st.ppid != parent:
		return fmt.Errorf("procgroup: the leader of group %d is a child of process %d, not of %d", pgid, st.ppid, parent)
	}
	fi, err := os.Stat("/proc/" + pid)
	if err != nil {
		return fmt.Errorf("procgroup: group %d: %w", pgid, err)
	}
	if sys, ok := fi.Sys().(*syscall.Stat_t); !ok || int(sys.Uid) != uid {
		return fmt.Errorf("procgroup: the leader of group %d does not run as uid %d", pgid, uid)
	}
	return nil
}

// Children lists the live processes whose parent is pid, from /proc (none
// where /proc cannot be read): the group leaders a supervisor started, say.
func Children(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := readStat(e.Name()); ok && st.ppid == pid && st.state != 'Z' && st.state != 'X' {
			out = append(out, child)
		}
	}
	return out
}

// Gone reports whether process pid has exited: it no longer exists, or it
// is a zombie waiting to be reaped.
func Gone(pid int) bool {
	state, _, ok := procStat(strconv.Itoa(pid))
	return !ok || state == 'Z' || state == 'X'
}
