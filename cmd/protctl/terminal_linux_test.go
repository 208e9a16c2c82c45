package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestNoTerminalQueriesOnSilentTerminal runs the protctl binary with its
// stdin and stdout on a pseudo-terminal whose other end never answers, as
// under a pre-commit hook, `ssh -tt` or `script`. A query of the terminal
// (OSC 11 for the background colour, CSI 6n for the cursor) would show on
// stdout and then wait for an answer that never comes; nothing but the
// document may reach the terminal. The child gets CI unset and TERM=xterm,
// the conditions under which a query would be sent.
func TestNoTerminalQueriesOnSilentTerminal(t *testing.T) {
	bin := buildProtctl(t)
	for _, tc := range []struct {
		name string
		args []string
		env  []string
		// same: stdout must equal the piped run's byte for byte.
		same bool
		// noEscapes: not even colour (SGR) may be written.
		noEscapes bool
		// shows is text stdout must have (the check is not vacuous).
		shows string
	}{
		{name: "json with NO_COLOR and --color never", args: []string{"version", "-o", "json", "--color", "never"}, env: []string{"NO_COLOR=1"}, same: true, noEscapes: true},
		{name: "json with colour auto", args: []string{"version", "-o", "json"}, same: true, noEscapes: true},
		{name: "yaml", args: []string{"version", "-o", "yaml"}, same: true, noEscapes: true},
		{name: "table with NO_COLOR", args: []string{"version"}, env: []string{"NO_COLOR=1"}, same: true, noEscapes: true},
		{name: "config view json", args: []string{"config", "view", "-o", "json"}, same: true, noEscapes: true},
		// Colour on: SGR styling is expected, a query is not.
		{name: "table with colour", args: []string{"version"}, shows: "\x1b["},
		// The dashboard (on the in-memory demo) draws on the terminal and
		// reads keys from it, and still asks it nothing.
		{name: "dashboard", args: []string{"demo", "--duration", "1s"}, shows: "\x1b[?1049h"}, // the alternate screen
	} {
		t.Run(tc.name, func(t *testing.T) {
			home := t.TempDir()
			env := append([]string{
				"PATH=" + os.Getenv("PATH"),
				"HOME=" + home,
				"XDG_CONFIG_HOME=" + filepath.Join(home, ".config"),
				"TERM=xterm",
			}, tc.env...)
			got, stderr := runOnSilentTerminal(t, bin, env, tc.args...)
			if i := bytes.Index(got, []byte("\x1b]")); i >= 0 {
				t.Errorf("stdout has an OSC sequence (a terminal query) at byte %d: %q", i, got)
			}
			if bytes.Contains(got, []byte("\x1b[6n")) || bytes.Contains(got, []byte("\x1b[c")) {
				t.Errorf("stdout has a status query (CSI 6n or DA1): %q", got)
			}
			if !bytes.Contains(got, []byte(tc.shows)) {
				t.Errorf("stdout does not show %q: %q", tc.shows, got)
			}
			if tc.noEscapes && bytes.IndexByte(got, 0x1b) >= 0 {
				t.Errorf("stdout has escape sequences with colour off: %q", got)
			}
			if tc.same {
				cmd := exec.Command(bin, tc.args...)
				cmd.Env = env
				want, err := cmd.Output()
				if err != nil {
					t.Fatalf("piped run: %v", err)
				}
				if !bytes.Equal(got, want) {
					t.Errorf("stdout on a terminal differs from the piped document:\n got %q\nwant %q\nstderr: %s", got, want, stderr)
				}
			}
		})
	}
}

// runOnSilentTerminal runs bin with stdin and stdout on a new
// pseudo-terminal (its controlling terminal, in the foreground) and stderr
// on a pipe, reads everything written to the terminal, and answers
// nothing. Output post-processing is off, so the bytes are the program's.
func runOnSilentTerminal(t *testing.T, bin string, env []string, args ...string) (stdout, stderr []byte) {
	t.Helper()
	master, tty := openPTY(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	cmd.Stdin, cmd.Stdout = tty, tty
	var errBuf bytes.Buffer
	cmd.Stderr = &errBuf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The child holds the terminal now; once it exits, reads of the master
	// end fail (EIO) after the last byte.
	_ = tty.Close()
	read := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(master)
		read <- b
	}()
	waitErr := cmd.Wait()
	var out []byte
	select {
	case out = <-read:
	case <-time.After(10 * time.Second):
		t.Fatal("the terminal stayed open after protctl exited")
	}
	if waitErr != nil {
		t.Fatalf("protctl %v: %v\nstdout: %q\nstderr: %s", args, waitErr, out, errBuf.Bytes())
	}
	return out, errBuf.Bytes()
}

// openPTY opens a pseudo-terminal pair (Linux: /dev/ptmx) with output
// post-processing off on the terminal side, 80x24.
func openPTY(t *testing.T) (master, tty *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { _ = m.Close() })
	fd := int(m.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlockpt: %v", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("ptsname: %v", err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	sfd := int(s.Fd())
	tio, err := unix.IoctlGetTermios(sfd, unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	tio.Oflag &^= unix.OPOST
	if err := unix.IoctlSetTermios(sfd, unix.TCSETS, tio); err != nil {
		t.Fatal(err)
	}
	if err := unix.IoctlSetWinsize(sfd, unix.TIOCSWINSZ, &unix.Winsize{Row: 24, Col: 80}); err != nil {
		t.Fatal(err)
	}
	return m, s
}
