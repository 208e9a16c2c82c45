package handlers

import "os/exec"

// setProcessGroup does nothing on Windows: a timeout kills the command
// only.
func setProcessGroup(*exec.Cmd) {}

func killProcessGroup(cmd *exec.Cmd) error {
	if cmd.Process == nil {
		return nil
	}
	return cmd.Process.Kill()
}
