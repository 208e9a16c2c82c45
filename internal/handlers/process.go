package handlers

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/protctl/protctl/pkg/runtime"
)

// ProcessConfig configures NewProcess.
type ProcessConfig struct {
	// Command is the program and its arguments (no shell). Required. A
	// relative program path with a '/' is resolved against Dir; a bare
	// name is looked up in PATH.
	Command []string
	// Dir is the working directory. Default: the node's.
	Dir string
	// Env adds variables to the node's environment (minus the node's
	// secrets, see SecretEnv).
	Env map[string]string
	// Timeout bounds one call, from the moment its request is written
	// (the wait for an in-flight slot does not count). A call the child
	// does not answer in time fails: an aggregate failure when the child
	// answered other calls meanwhile (this message is slow), a systemic
	// one when it answered none (the child is stuck: it is killed and
	// restarted) or when calls were waiting for an in-flight slot (the
	// handler is overloaded). Default: 30s.
	Timeout time.Duration
	// MaxInFlight bounds the calls the child has at once, over every
	// partition; calls beyond it wait for a slot. Default: 64.
	MaxInFlight int
	// StopTimeout bounds Close's wait for the child to exit after its
	// stdin is closed; then its process group is killed. Default: 10s.
	StopTimeout time.Duration
	// RestartBackoff is the least wait before the child is started again
	// after it exited; it doubles with each exit that answered nothing,
	// up to MaxRestartBackoff, with jitter (a wait between half the
	// backoff and all of it). Defaults: 100ms and 30s.
	RestartBackoff, MaxRestartBackoff time.Duration
	// Logger receives the child's stderr (a warning per line) and its
	// exits and restarts. Default: discard.
	Logger *slog.Logger
	// Rand is the jitter's source. Default: a source of its own.
	Rand *rand.Rand
}

// Process is a handler served by one long-lived child process, which
// reads a request per line on its stdin and writes a result per line on
// its stdout (newline-delimited JSON, docs/decisions/0027-process-handler.md):
//
//	-> {"id":7,"metadata":{"subscription":"app.Billing","partition":"k1","position":"1700000000000-3",...},"envelope":{...}}
//	<- {"id":7,"result":"ok"}
//	<- {"id":8,"result":"error","error":"unknown product"}   aggregate failure: retry, then park
//	<- {"id":9,"result":"retry","error":"db down"}           systemic: back off, retry later
//
// Calls for several partitions are in flight at once (up to
// MaxInFlight), and the child may answer them in any order. The child is
// started by the first call; when it exits (or breaks the protocol) the
// calls in flight fail as systemic, calls until its restart fail as
// systemic, and the call after the restart backoff starts it again. Its
// stderr is logged line by line at warn.
//
// It is safe for concurrent use.
type Process struct {
	cfg   ProcessConfig
	base  []string
	slots *Slots

	mu        sync.Mutex
	child     *child
	closed    bool
	exits     int       // consecutive exits of children that answered nothing
	restartAt time.Time // no start before
	lastExit  string    // why the last child ended
	rnd       *rand.Rand
	starts    atomic.Int64
}

// child is one run of the command.
type child struct {
	p      *Process
	cmd    *exec.Cmd
	pid    int
	writes chan []byte
	stderr *tail

	mu      sync.Mutex
	pending map[uint64]chan processResult
	nextID  uint64
	closing bool // stdin closed or being closed: no more writes

	started time.Time
	replies atomic.Uint64 // results read: the child's progress
	dead    chan struct{} // closed once the child exited
	exitErr string        // why, set before dead closes
}

type processResult struct {
	Result string `json:"result"`
	Error  string `json:"error"`
}

// Results a process handler's child writes.
const (
	ProcessOK    = "ok"
	ProcessError = "error"
	ProcessRetry = "retry"
)

// processLineLimit is the longest result line read from the child (and
// the longest stderr line logged whole).
const processLineLimit = 1 << 20

// NewProcess returns a process handler. It starts nothing: the first call
// starts the child.
func NewProcess(cfg ProcessConfig) (*Process, error) {
	if len(cfg.Command) == 0 || cfg.Command[0] == "" {
		return nil, errors.New("handlers: process: a command is required")
	}
	if cfg.Timeout < 0 || cfg.MaxInFlight < 0 || cfg.StopTimeout < 0 || cfg.RestartBackoff < 0 || cfg.MaxRestartBackoff < 0 {
		return nil, errors.New("handlers: process: negative timeout, in-flight bound or backoff")
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.MaxInFlight == 0 {
		cfg.MaxInFlight = 64
	}
	if cfg.StopTimeout == 0 {
		cfg.StopTimeout = 10 * time.Second
	}
	if cfg.RestartBackoff == 0 {
		cfg.RestartBackoff = 100 * time.Millisecond
	}
	if cfg.MaxRestartBackoff == 0 {
		cfg.MaxRestartBackoff = 30 * time.Second
	}
	if cfg.MaxRestartBackoff < cfg.RestartBackoff {
		cfg.MaxRestartBackoff = cfg.RestartBackoff
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	rnd := cfg.Rand
	if rnd == nil {
		rnd = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	return &Process{cfg: cfg, base: inheritedEnv(cfg.Env), slots: NewSlots(cfg.MaxInFlight, nil), rnd: rnd}, nil
}

// Starts is how many times the child was started.
func (p *Process) Starts() int { return int(p.starts.Load()) }

// restartDelay is the wait before the next start after exits consecutive
// exits: RestartBackoff doubled per exit up to MaxRestartBackoff, then a
// random point in its upper half, so that the nodes of a service whose
// children died together (a shared dependency restarted) do not restart
// them in step.
func restartDelay(exits int, min, max time.Duration, rnd *rand.Rand) time.Duration {
	d := min
	for i := 1; i < exits && d < max; i++ {
		d *= 2
	}
	if d > max {
		d = max
	}
	half := d / 2
	return half + time.Duration(rnd.Int64N(int64(d-half)+1))
}

// running returns the running child, starting one when none runs and the
// restart backoff has passed.
func (p *Process) running() (*child, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	name := p.cfg.Command[0]
	if p.closed {
		return nil, runtime.Systemic(fmt.Errorf("process %s: the handler is stopped", name))
	}
	if p.child != nil {
		return p.child, nil
	}
	if wait := time.Until(p.restartAt); wait > 0 {
		return nil, runtime.Systemic(fmt.Errorf("process %s: %s; restarting in %s", name, p.lastExit, wait.Round(time.Millisecond)))
	}
	c, err := p.start()
	if err != nil {
		p.exits++
		p.lastExit = "did not start: " + err.Error()
		p.restartAt = time.Now().Add(restartDelay(p.exits, p.cfg.RestartBackoff, p.cfg.MaxRestartBackoff, p.rnd))
		p.cfg.Logger.Warn("process handler did not start", "command", name, "err", err)
		return nil, runtime.Systemic(fmt.Errorf("process %s: %w", name, err))
	}
	p.child = c
	return c, nil
}

// start runs the command and its reading goroutines (p.mu held).
func (p *Process) start() (*child, error) {
	cmd := exec.Command(p.cfg.Command[0], p.cfg.Command[1:]...)
	cmd.Dir = p.cfg.Dir
	cmd.Env = p.base
	setProcessGroup(cmd)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p.starts.Add(1)
	c := &child{
		p: p, cmd: cmd, pid: cmd.Process.Pid, started: time.Now(),
		writes:  make(chan []byte, p.cfg.MaxInFlight),
		stderr:  &tail{n: StderrLogLimit},
		pending: map[uint64]chan processResult{},
		dead:    make(chan struct{}),
	}
	p.cfg.Logger.Info("process handler started", "command", p.cfg.Command[0], "pid", c.pid)
	var readers sync.WaitGroup
	readers.Add(2)
	go c.write(stdin, c.writes)
	go func() { defer readers.Done(); c.readResults(stdout) }()
	go func() { defer readers.Done(); c.readStderr(stderr) }()
	go func() {
		readers.Wait()
		err := cmd.Wait()
		c.exited(err)
	}()
	return c, nil
}

// write copies the request lines to the child's stdin until writes is
// closed (Close) or a write fails (the child died), then closes stdin.
func (c *child) write(stdin io.WriteCloser, writes <-chan []byte) {
	w := bufio.NewWriterSize(stdin, 64<<10)
	broken := false
	for line := range writes {
		if broken {
			continue
		}
		_, err := w.Write(line)
		// Flush when nothing else is queued: one write per burst.
		if err == nil && len(writes) == 0 {
			err = w.Flush()
		}
		broken = err != nil
	}
	_ = w.Flush()
	_ = stdin.Close()
}

// readResults reads result lines until the child's stdout ends. A line
// that is not a result breaks the protocol: the child is killed (its
// calls then fail as systemic).
func (c *child) readResults(stdout io.Reader) {
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), processLineLimit)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 {
			continue
		}
		var r struct {
			ID *uint64 `json:"id"`
			processResult
		}
		err := json.Unmarshal(line, &r)
		if err == nil && r.ID == nil {
			err = errors.New(`no "id"`)
		}
		if err == nil && r.Result != ProcessOK && r.Result != ProcessError && r.Result != ProcessRetry {
			err = fmt.Errorf(`"result" is %q, want ok, error or retry`, r.Result)
		}
		if err != nil {
			c.kill(fmt.Sprintf("wrote a line that is not a result (%v): %.200q", err, line))
			break
		}
		c.replies.Add(1)
		c.mu.Lock()
		ch, ok := c.pending[*r.ID]
		delete(c.pending, *r.ID)
		c.mu.Unlock()
		if !ok {
			// The call timed out or was stopped: nobody waits.
			c.p.cfg.Logger.Debug("process handler answered a call that is gone", "command", c.p.cfg.Command[0], "pid", c.pid, "id", *r.ID)
			continue
		}
		ch <- r.processResult
	}
	if err := sc.Err(); err != nil {
		c.kill("stdout: " + err.Error())
	}
	_, _ = io.Copy(io.Discard, stdout) // let the child exit
}

// readStderr logs each stderr line at warn and keeps the end for the
// report of the child's exit.
func (c *child) readStderr(stderr io.Reader) {
	r := bufio.NewReaderSize(stderr, 4096)
	for {
		line, err := r.ReadSlice('\n')
		if len(line) > 0 {
			_, _ = c.stderr.Write(line)
			text := line
			if len(text) > StderrLogLimit {
				text = text[:StderrLogLimit]
			}
			c.p.cfg.Logger.Warn("process handler stderr", "command", c.p.cfg.Command[0], "pid", c.pid, "line", string(trimNewline(text)))
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			return
		}
	}
}

func trimNewline(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

// kill ends the child (its process group) for a reason the log and the
// calls in flight give.
func (c *child) kill(reason string) {
	c.mu.Lock()
	if c.exitErr == "" {
		c.exitErr = reason
	}
	c.mu.Unlock()
	c.p.cfg.Logger.Warn("process handler killed", "command", c.p.cfg.Command[0], "pid", c.pid, "reason", reason)
	_ = killProcessGroup(c.cmd)
}

// exited runs once the child has exited: the calls in flight fail (they
// wait on dead), and the next start waits out the backoff.
func (c *child) exited(err error) {
	p := c.p
	c.mu.Lock()
	why := c.exitErr
	if why == "" {
		why = "exited"
		if err != nil {
			why = "exited: " + err.Error()
		} else if c.cmd.ProcessState != nil {
			why = "exited: " + c.cmd.ProcessState.String()
		}
	}
	c.exitErr = why
	inFlight := len(c.pending)
	c.closing = true
	c.mu.Unlock()
	close(c.dead)
	close2(c)

	p.mu.Lock()
	if p.child == c {
		p.child = nil
	}
	if c.replies.Load() > 0 {
		p.exits = 1
	} else {
		p.exits++
	}
	p.lastExit = "the child " + strconv.Itoa(c.pid) + " " + why
	delay := restartDelay(p.exits, p.cfg.RestartBackoff, p.cfg.MaxRestartBackoff, p.rnd)
	p.restartAt = time.Now().Add(delay)
	closed := p.closed
	p.mu.Unlock()
	if closed {
		p.cfg.Logger.Info("process handler stopped", "command", p.cfg.Command[0], "pid", c.pid, "status", why)
		return
	}
	p.cfg.Logger.Warn("process handler exited", "command", p.cfg.Command[0], "pid", c.pid, "status", why,
		"inFlight", inFlight, "restartIn", delay, "stderr", c.stderr.String())
}

// close2 closes the child's request channel once (exited or Close).
func close2(c *child) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.writes != nil {
		close(c.writes)
		c.writes = nil
	}
}

// send registers a call and queues its request line.
func (c *child) send(line func(id uint64) ([]byte, error)) (uint64, chan processResult, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing || c.writes == nil {
		return 0, nil, errors.New("the child is stopping")
	}
	c.nextID++
	id := c.nextID
	b, err := line(id)
	if err != nil {
		return 0, nil, err
	}
	ch := make(chan processResult, 1)
	select {
	case c.writes <- b:
	default:
		// MaxInFlight lines are queued and unread: the child does not
		// read its stdin.
		return 0, nil, errors.New("the child does not read its stdin")
	}
	c.pending[id] = ch
	return id, ch, nil
}

func (c *child) forget(id uint64) {
	c.mu.Lock()
	delete(c.pending, id)
	c.mu.Unlock()
}

func (c *child) why() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.exitErr
}

// processRequest is a request line.
type processRequest struct {
	ID       uint64          `json:"id"`
	Metadata map[string]any  `json:"metadata"`
	Envelope json.RawMessage `json:"envelope,omitempty"`
	Base64   []byte          `json:"envelopeBase64,omitempty"`
}

// requestLine encodes m's request: the envelope as JSON (compacted to
// one line), or in base64 when it is not JSON; the metadata under the
// names of the exec handler's variables, lower-cased.
func requestLine(id uint64, m runtime.Message) ([]byte, error) {
	md := make(map[string]any, 12)
	for _, kv := range metadata(m) {
		name := processFieldNames[kv[0]]
		switch kv[0] {
		case EnvGeneration:
			md[name] = m.Generation
		case EnvAttempt:
			md[name] = m.Attempt
		default:
			md[name] = kv[1]
		}
	}
	req := processRequest{ID: id, Metadata: md, Envelope: m.Data}
	if len(m.Data) == 0 {
		req.Envelope = json.RawMessage("null")
	}
	b, err := json.Marshal(req)
	if err != nil {
		// Not JSON: carry the bytes as they are.
		req.Envelope, req.Base64 = nil, m.Data
		if b, err = json.Marshal(req); err != nil {
			return nil, err
		}
	}
	return append(b, '\n'), nil
}

var processFieldNames = map[string]string{
	EnvSubscription: "subscription", EnvPartition: "partition", EnvPosition: "position",
	EnvGeneration: "generation", EnvAttempt: "attempt", EnvSource: "source", EnvCategory: "category",
	EnvStream: "stream", EnvTopic: "topic", EnvKey: "key", EnvAggregate: "aggregate",
}

// Handle sends m to the child and waits for its result.
func (p *Process) Handle(ctx context.Context, m runtime.Message) error {
	name := p.cfg.Command[0]
	release, mark, err := p.slots.acquire(ctx)
	if err != nil {
		return runtime.Systemic(fmt.Errorf("process %s: stopped while waiting for an in-flight slot: %w", name, context.Cause(ctx)))
	}
	defer release()
	if !runtime.LeaseTrusted(ctx) {
		// The wait for the slot outlived the lease (see exec.go).
		return runtime.Systemic(fmt.Errorf("process %s: the partition's lease is no longer trusted after the wait for an in-flight slot", name))
	}
	c, err := p.running()
	if err != nil {
		return err
	}
	id, ch, err := c.send(func(id uint64) ([]byte, error) { return requestLine(id, m) })
	if err != nil {
		select {
		case <-c.dead:
			return runtime.Systemic(fmt.Errorf("process %s: the child %d %s", name, c.pid, c.why()))
		default:
		}
		return runtime.Systemic(fmt.Errorf("process %s: %w", name, err))
	}
	progress := c.replies.Load()
	timer := time.NewTimer(p.cfg.Timeout)
	defer timer.Stop()
	select {
	case r := <-ch:
		return p.result(m, r)
	case <-c.dead:
		// The result may have been read just before the exit.
		select {
		case r := <-ch:
			return p.result(m, r)
		default:
		}
		err := runtime.Systemic(fmt.Errorf("process %s: the child %d %s with the call in flight%s", name, c.pid, c.why(), outputSuffix(c.stderr)))
		p.cfg.Logger.Warn("process handler failed", messageAttrs(m, "class", "systemic", "err", err)...)
		return err
	case <-ctx.Done():
		c.forget(id)
		return runtime.Systemic(fmt.Errorf("process %s: stopped: %w", name, context.Cause(ctx)))
	case <-timer.C:
		c.forget(id)
		var err error
		switch {
		case c.replies.Load() == progress && (progress > 0 || time.Since(c.started) >= 3*p.cfg.Timeout):
			// Not one result in a whole timeout from a child that did
			// answer before (or had long enough to start): it is stuck,
			// not this message.
			c.kill(fmt.Sprintf("answered no call for %s", p.cfg.Timeout))
			err = runtime.Systemic(fmt.Errorf("process %s: timed out after %s, the child answered no call meanwhile: killed, to be restarted", name, p.cfg.Timeout))
		case c.replies.Load() == progress:
			// A child still starting (a slow start on a loaded machine):
			// not the message's fault, and not a reason to kill it, which
			// would only start the slow start over.
			err = runtime.Systemic(fmt.Errorf("process %s: timed out after %s, the child (started %s ago) has answered no call yet", name, p.cfg.Timeout, time.Since(c.started).Round(time.Millisecond)))
		case p.slots.saturatedSince(mark):
			err = runtime.Systemic(fmt.Errorf("process %s: timed out after %s while the handler was overloaded (all %d in-flight slots taken, calls waiting)", name, p.cfg.Timeout, p.cfg.MaxInFlight))
		default:
			err = fmt.Errorf("process %s: timed out after %s (the child answered other calls meanwhile)", name, p.cfg.Timeout)
		}
		p.cfg.Logger.Warn("process handler failed", messageAttrs(m, "class", runtime.Classify(err).String(), "err", err)...)
		return err
	}
}

func (p *Process) result(m runtime.Message, r processResult) error {
	name := p.cfg.Command[0]
	msg := r.Error
	if len(msg) > StderrLogLimit {
		msg = msg[:StderrLogLimit] + "…"
	}
	var err error
	switch r.Result {
	case ProcessOK:
		return nil
	case ProcessRetry:
		err = runtime.Systemic(fmt.Errorf("process %s: retry: %s", name, msg))
	default:
		err = fmt.Errorf("process %s: error: %s", name, msg)
	}
	p.cfg.Logger.Warn("process handler failed", messageAttrs(m, "class", runtime.Classify(err).String(), "err", err)...)
	return err
}

// Close stops the handler: calls fail from now on, the child's stdin is
// closed (its signal to finish and exit), and Close waits for it to exit
// until StopTimeout passes or ctx ends, then kills its process group.
// Call it after the node stopped (no call in flight). Closing twice, or
// before a call started the child, is a no-op.
func (p *Process) Close(ctx context.Context) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	c := p.child
	p.mu.Unlock()
	if c == nil {
		return nil
	}
	c.mu.Lock()
	c.closing = true
	c.mu.Unlock()
	close2(c) // the writer flushes and closes stdin
	timer := time.NewTimer(p.cfg.StopTimeout)
	defer timer.Stop()
	select {
	case <-c.dead:
		return nil
	case <-timer.C:
	case <-ctx.Done():
	}
	c.kill(fmt.Sprintf("did not exit within %s of its stdin closing", p.cfg.StopTimeout))
	<-c.dead
	return fmt.Errorf("process %s: the child did not exit within %s of its stdin closing: killed", p.cfg.Command[0], p.cfg.StopTimeout)
}
