package handlers

import "syscall"

// setParentDeathSignal kills the command when the node dies (SIGKILL, a
// crash): a handler must not run on after its node, since the partition's
// next owner handles the message again.
func setParentDeathSignal(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
