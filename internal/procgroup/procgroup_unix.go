//go:build unix

// Package procgroup starts, signals and stops whole process groups, so that
// a hook's or a `tenure run` child's own children are stopped with it.
package procgroup

import (
	"bytes"
	"errors"
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
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, 0, false
	}
	// "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 3 || len(f[0]) != 1 {
		return 0, 0, false
	}
	pg, err := strconv.Atoi(string(f[2]))
	return f[0][0], pg, err == nil
}

// Gone reports whether process pid has exited: it no longer exists, or it
// is a zombie waiting to be reaped.
func Gone(pid int) bool {
	state, _, ok := procStat(strconv.Itoa(pid))
	return !ok || state == 'Z' || state == 'X'
}
