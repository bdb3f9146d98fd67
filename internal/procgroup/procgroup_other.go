//go:build !unix

// Package procgroup starts, signals and stops whole process groups. Process
// groups exist only on Unix; on other systems the callers refuse to start
// processes, so these are never called with a real group.
package procgroup

import (
	"errors"
	"syscall"
	"time"
)

// Supported reports whether this system has process groups.
const Supported = false

// Attr returns nil: no process groups here.
func Attr() *syscall.SysProcAttr { return nil }

// Signal fails: no process groups here.
func Signal(int, syscall.Signal) error {
	return errors.New("procgroup: process groups need a Unix system")
}

// Stop does nothing.
func Stop(int, time.Duration, <-chan struct{}) bool { return true }

// Kill does nothing.
func Kill(int, time.Duration) {}

// AttrDying returns nil: no process groups here.
func AttrDying() *syscall.SysProcAttr { return nil }

// Attribute fails: no process groups here.
func Attribute(int, int, int) error {
	return errors.New("procgroup: process groups need a Unix system")
}

// Children returns nil: no /proc here.
func Children(int) []int { return nil }
