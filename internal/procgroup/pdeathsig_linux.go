//go:build linux

package procgroup

import "syscall"

// setPdeathsig asks the kernel to SIGKILL the child when its parent dies.
//
// SIGKILL, not SIGTERM: the parent is a `tenure run` that died without
// stopping its command (kill -9, the OOM killer), so nothing is left to
// turn a SIGTERM the command ignores or handles slowly into a SIGKILL
// after the grace; the command would run on, possibly next to the next
// leader's. The agent, when the runner registered the group, stops the
// rest of the group itself (SIGTERM, then SIGKILL after the grace).
//
// Two limits. The signal reaches only the direct child, not its children
// (they are in its process group: see Attribute and the agent). And it is
// sent when the *thread* that forked dies, not the process: Go may end an
// OS thread whose goroutine exited while locked to it (golang/go#27505),
// so the caller must start the command from a goroutine locked to its
// thread (runtime.LockOSThread) that stays locked until the command has
// been waited for.
func setPdeathsig(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
