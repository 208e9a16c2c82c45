package handlers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	goruntime "runtime"
	"strings"
	"time"

	"github.com/protctl/protctl/pkg/runtime"
)

// ExecConfig configures NewExec.
type ExecConfig struct {
	// Command is the program and its arguments (no shell). Required. A
	// relative program path with a '/' is resolved against Dir; a bare
	// name is looked up in PATH.
	Command []string
	// Dir is the working directory. Default: the node's.
	Dir string
	// Env adds variables to the node's environment (minus the node's
	// secrets, see SecretEnv).
	Env map[string]string
	// Timeout bounds one run, from its start (the wait for a slot does
	// not count); then the command's whole process group is killed and
	// the message fails: an aggregate failure, or a systemic one when the
	// node was out of slots during the run (see Slots). Default: 30s.
	Timeout time.Duration
	// OutputLimit is how many bytes of the command's combined stdout and
	// stderr are kept for the error of a failed run (and the debug log of
	// a successful one). Default: 512.
	OutputLimit int
	// Slots bounds the runs of every exec handler of the node at once
	// (NewSlots); calls beyond it wait for a slot before their run starts.
	// Default: nil, no bound (run node always sets one).
	Slots *Slots
	// Logger receives a debug line per run and a warning per failed run
	// with the tail of its stderr; each line names the message
	// (subscription, partition, position, attempt), so the logger needs
	// none of these attributes. Default: discard.
	Logger *slog.Logger
}

// StderrLogLimit is how much of a failed command's stderr (its end) the
// warning logged for the failure carries.
const StderrLogLimit = 4 << 10

// SecretEnv are the node's own secrets: they are removed from the
// environment exec handlers inherit.
var SecretEnv = []string{"PROTCTL_REDIS_PASSWORD", "PROTCTL_KAFKA_PASSWORD", "PROTCTL_ADMIN_TOKEN"}

// Exec runs a command per message: the envelope on stdin, the metadata in
// the environment (EnvSubscription, ...). Exit 0 is success, exit 75
// (ExitTempFail) a systemic failure, anything else an aggregate failure
// carrying the tail of the command's output. Each run is its own process
// group, so that a timeout kills whatever the command started too.
//
// It is safe for concurrent use: the runtime calls it once per partition
// at a time, for many partitions at once.
type Exec struct {
	cfg  ExecConfig
	base []string // the inherited environment plus Env
}

// NewExec returns an exec handler. It starts nothing.
func NewExec(cfg ExecConfig) (*Exec, error) {
	if len(cfg.Command) == 0 || cfg.Command[0] == "" {
		return nil, errors.New("handlers: exec: a command is required")
	}
	if cfg.Timeout < 0 || cfg.OutputLimit < 0 {
		return nil, errors.New("handlers: exec: negative timeout or output limit")
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.OutputLimit == 0 {
		cfg.OutputLimit = 512
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Exec{cfg: cfg, base: inheritedEnv(cfg.Env)}, nil
}

// inheritedEnv is the node's environment less its secrets (SecretEnv),
// plus env.
func inheritedEnv(env map[string]string) []string {
	base := make([]string, 0, len(os.Environ())+len(env))
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		secret := false
		for _, s := range SecretEnv {
			secret = secret || name == s
		}
		if !secret {
			base = append(base, kv)
		}
	}
	for k, v := range env {
		base = append(base, k+"="+v)
	}
	return base
}

// Handle runs the command for m, once a slot is free.
func (e *Exec) Handle(ctx context.Context, m runtime.Message) error {
	var mark uint64
	if e.cfg.Slots != nil {
		release, mk, err := e.cfg.Slots.acquire(ctx)
		if err != nil {
			return runtime.Systemic(fmt.Errorf("exec %s: stopped while waiting for a slot: %w", e.cfg.Command[0], context.Cause(ctx)))
		}
		defer release()
		mark = mk
		if !runtime.LeaseTrusted(ctx) {
			// The wait for the slot outlived the lease (the runtime
			// checked it before the call): another node may be handling
			// the message now.
			return runtime.Systemic(fmt.Errorf("exec %s: the partition's lease is no longer trusted after the wait for a slot", e.cfg.Command[0]))
		}
	}
	start := time.Now()
	runCtx, cancel := context.WithTimeout(ctx, e.cfg.Timeout)
	defer cancel()
	cmd := exec.CommandContext(runCtx, e.cfg.Command[0], e.cfg.Command[1:]...)
	cmd.Dir = e.cfg.Dir
	env := make([]string, len(e.base), len(e.base)+12)
	copy(env, e.base)
	for _, kv := range metadata(m) {
		env = append(env, kv[0]+"="+kv[1])
	}
	cmd.Env = env
	stdin, closeStdin, err := commandInput(m.Data)
	if err != nil {
		return runtime.Systemic(fmt.Errorf("exec %s: stdin: %w", e.cfg.Command[0], err))
	}
	defer closeStdin()
	cmd.Stdin = stdin
	// out is the end of stdout and stderr together (the error a failure
	// records), stderr the end of stderr alone (the warning's). os/exec
	// copies each in a goroutine of its own, so the tails lock.
	out := &tail{n: e.cfg.OutputLimit}
	stderr := &tail{n: StderrLogLimit}
	cmd.Stdout, cmd.Stderr = out, io.MultiWriter(out, stderr)
	setProcessGroup(cmd)
	// Kill the whole group, not just the command: a shell script's
	// children would otherwise keep running (and keep the output pipe
	// open) after a timeout.
	cmd.Cancel = func() error { return killProcessGroup(cmd) }
	// After the command exits, wait at most this long for whatever it left
	// behind to close stdout and stderr.
	cmd.WaitDelay = time.Second
	err = cmd.Run()
	took := time.Since(start)
	if err == nil || (errors.Is(err, exec.ErrWaitDelay) && cmd.ProcessState != nil && cmd.ProcessState.Success()) {
		// ErrWaitDelay: the command exited 0 but left a process holding
		// its output.
		if e.cfg.Logger.Enabled(ctx, slog.LevelDebug) {
			e.cfg.Logger.Debug("exec handler ok", messageAttrs(m, "took", took, "output", out.String())...)
		}
		return nil
	}
	if ctx.Err() != nil {
		return runtime.Systemic(fmt.Errorf("exec %s: stopped: %w", e.cfg.Command[0], context.Cause(ctx)))
	}
	ferr := e.classify(err, runCtx, out, mark)
	e.cfg.Logger.Warn("exec handler failed", messageAttrs(m, "class", runtime.Classify(ferr).String(), "took", took, "err", ferr, "stderr", stderr.String())...)
	return ferr
}

// classify turns a failed run's error into the handler's error.
func (e *Exec) classify(err error, runCtx context.Context, out *tail, mark uint64) error {
	name := e.cfg.Command[0]
	if errors.Is(runCtx.Err(), context.DeadlineExceeded) {
		if e.cfg.Slots != nil && e.cfg.Slots.saturatedSince(mark) {
			// Calls were waiting for a slot: the node had more work than
			// it can run, and a run that times out then may be slow for
			// want of CPU, not for its message. Parking its aggregate
			// would blame the event for the node's load (issue 16 item
			// 7); pause and retry instead.
			return runtime.Systemic(fmt.Errorf("exec %s: timed out after %s while the node was overloaded (every one of its %d exec slots taken, calls waiting), process group killed%s",
				name, e.cfg.Timeout, e.cfg.Slots.Stats().Size, outputSuffix(out)))
		}
		return fmt.Errorf("exec %s: timed out after %s, process group killed%s", name, e.cfg.Timeout, outputSuffix(out))
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		// It did not start (not found, not executable): the message is
		// not at fault; pause and retry until the command is there.
		return runtime.Systemic(fmt.Errorf("exec %s: %w", name, err))
	}
	if exit.ExitCode() == ExitTempFail {
		return runtime.Systemic(fmt.Errorf("exec %s: exit %d (try again later)%s", name, ExitTempFail, outputSuffix(out)))
	}
	return fmt.Errorf("exec %s: %s%s", name, exit.ProcessState.String(), outputSuffix(out))
}

// prefilledInput is the largest input written into the command's stdin
// pipe before it starts: one page, what a pipe holds at the least (Linux
// gives a user over its pipe-pages limit one-page pipes).
const prefilledInput = 4096

// commandInput returns the command's stdin. Input that fits a pipe is
// written into one and the write end closed before the command starts, so
// the command reads all of it and EOF without the node running again: a
// node paused (SIGSTOP, a VM freeze) right after starting the command
// cannot hold its handler call back until after the lease has moved to
// another node, which would then see the call begin late under the old
// generation (TestRunNodeFailoverExec). Larger input is copied in by
// os/exec as it is read. closeInput closes the node's end.
func commandInput(data []byte) (stdin io.Reader, closeInput func(), err error) {
	if len(data) > prefilledInput || goruntime.GOOS == "windows" {
		return bytes.NewReader(data), func() {}, nil
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	_, err = w.Write(data)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		r.Close()
		return nil, nil, err
	}
	return r, func() { r.Close() }, nil
}

func outputSuffix(out *tail) string {
	s := strings.TrimSpace(out.String())
	if s == "" {
		return ""
	}
	return ": " + s
}

var _ io.Writer = (*tail)(nil)
