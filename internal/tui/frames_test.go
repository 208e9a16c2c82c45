package tui

import (
	"bytes"
	"errors"
	"io"
	"os"
	"testing"
	"time"

	"github.com/charmbracelet/lipgloss"
	"github.com/muesli/termenv"

	tea "github.com/protctl/protctl/internal/third_party/bubbletea"
	"github.com/protctl/protctl/internal/third_party/teatest"
	"github.com/protctl/protctl/internal/tui/tuitest"
)

// Golden frames: each test runs the dashboard in a real bubbletea program
// (teatest) at 120x30 with the Ascii colour profile, drives it with keys,
// waits until the frame shows what the test is about, and compares the
// final frame with testdata/<TestName>.golden. `go test ./internal/tui
// -update` rewrites the files.

const frameW, frameH = 120, 30

func TestMain(m *testing.M) {
	// bubbles components not styled through Options.Renderer (the
	// viewport) use lipgloss's default renderer.
	lipgloss.SetColorProfile(termenv.Ascii)
	os.Exit(m.Run())
}

func asciiRenderer() *lipgloss.Renderer {
	r := lipgloss.NewRenderer(io.Discard)
	r.SetColorProfile(termenv.Ascii)
	return r
}

func testOptions(src Source) Options {
	return Options{
		Source:   src,
		Actions:  &fakeActions{},
		Info:     Info{Context: "prod-eu", Redis: "redis://redis.internal:6379/0", Kafka: "kafka-1:9092", Layout: "protean"},
		Refresh:  time.Hour, // the tests refresh by hand
		Operator: "protctl:test",
		Now:      func() time.Time { return fixedNow },
		Renderer: asciiRenderer(),
	}
}

type program struct {
	t  *testing.T
	tm *teatest.TestModel
}

func startProgram(t *testing.T, opts Options) *program {
	t.Helper()
	tm := teatest.NewTestModel(t, New(opts), teatest.WithInitialTermSize(frameW, frameH))
	p := &program{t: t, tm: tm}
	t.Cleanup(func() { _ = tm.Quit() })
	return p
}

// waitFor waits until the program has written every one of all since
// the last wait (the renderer writes changed lines whole; a line written
// before is not seen again).
func (p *program) waitFor(all ...string) {
	p.t.Helper()
	teatest.WaitFor(p.t, p.tm.Output(), func(b []byte) bool {
		for _, s := range all {
			if !bytes.Contains(b, []byte(s)) {
				return false
			}
		}
		return true
	}, teatest.WithDuration(10*time.Second), teatest.WithCheckInterval(5*time.Millisecond))
}

func (p *program) keys(ks ...string) {
	for _, k := range ks {
		p.tm.Send(tuitest.Key(k))
	}
}

// frame quits the program and returns its final frame.
func (p *program) frame() string {
	p.t.Helper()
	if err := p.tm.Quit(); err != nil {
		p.t.Fatal(err)
	}
	fm := p.tm.FinalModel(p.t, teatest.WithFinalTimeout(10*time.Second))
	return fm.(*Model).View()
}

func (p *program) golden() {
	p.t.Helper()
	teatest.RequireEqualOutput(p.t, []byte(p.frame()+"\n"))
}

// typeText sends each rune of s as a key.
func (p *program) typeText(s string) {
	for _, r := range s {
		p.tm.Send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{r}})
	}
}

func TestFramePartitions(t *testing.T) {
	p := startProgram(t, testOptions(scenario()))
	p.waitFor("o-never", "nodes 3", "parked 2")
	p.golden()
}

func TestFrameLeases(t *testing.T) {
	p := startProgram(t, testOptions(scenario()))
	p.waitFor("o-never")
	p.keys(":")
	p.typeText("leases")
	p.keys("enter")
	p.waitFor("LEASE-KEY", "o-lagging")
	p.golden()
}

func TestFrameParked(t *testing.T) {
	p := startProgram(t, testOptions(scenario()))
	p.waitFor("o-never")
	p.keys(":")
	p.typeText("parked")
	p.keys("enter")
	p.waitFor("acct-42")
	p.golden()
}

func TestFrameTopics(t *testing.T) {
	p := startProgram(t, testOptions(scenario()))
	p.waitFor("o-never")
	p.keys(":")
	p.typeText("topics")
	p.keys("enter")
	p.waitFor("fraud-check")
	p.golden()
}

func TestFrameNodes(t *testing.T) {
	p := startProgram(t, testOptions(scenario()))
	p.waitFor("o-never")
	p.keys(":")
	p.typeText("nodes")
	p.keys("enter")
	p.waitFor("node-c")
	p.golden()
}

// The filter is applied as it is typed; the frame shows the bar still
// open with the pattern, and the title the count of matching rows.
func TestFrameFilter(t *testing.T) {
	p := startProgram(t, testOptions(scenario()))
	p.waitFor("o-never")
	p.keys("/")
	p.typeText("!o-")
	p.waitFor("filter /!o-/")
	p.golden()
}

func TestFrameHelp(t *testing.T) {
	p := startProgram(t, testOptions(scenario()))
	p.waitFor("o-never")
	p.keys("?")
	p.waitFor("Navigate")
	p.golden()
}

func TestFrameHelpReadOnly(t *testing.T) {
	opts := testOptions(scenario())
	opts.ReadOnly = true
	p := startProgram(t, opts)
	p.waitFor("o-never")
	p.keys("?")
	p.waitFor("disabled: read-only")
	p.golden()
}

func TestFrameDetail(t *testing.T) {
	p := startProgram(t, testOptions(scenario()))
	p.waitFor("o-never")
	p.keys("/")
	p.typeText("halted")
	p.keys("enter")
	p.waitFor("filter /halted/")
	p.keys("enter")
	p.waitFor("poison message")
	p.golden()
}

// A release on the halted partition opens the plan: the equivalent
// command line (with --force, its lease being held), the plan's item and
// the question.
func TestFrameConfirm(t *testing.T) {
	opts := testOptions(scenario())
	p := startProgram(t, opts)
	p.waitFor("o-never")
	p.keys("/")
	p.typeText("halted")
	p.keys("enter")
	p.waitFor("filter /halted/")
	p.keys("L")
	p.waitFor("Apply 1 change?")
	p.golden()
}

func TestFrameConfirmResult(t *testing.T) {
	opts := testOptions(scenario())
	p := startProgram(t, opts)
	p.waitFor("o-never")
	p.keys("/")
	p.typeText("halted")
	p.keys("enter")
	p.waitFor("filter /halted/")
	p.keys("L")
	p.waitFor("Apply 1 change?")
	p.keys("y")
	p.waitFor("Result:")
	p.golden()
}

// A backend that fails after the first read: the error line, and the
// rows of the last good read.
func TestFrameBackendError(t *testing.T) {
	src := scenario()
	p := startProgram(t, testOptions(src))
	p.waitFor("o-never")
	src.SetErr(errors.New("dial tcp 10.0.0.7:6379: connect: connection refused"))
	p.keys("r")
	p.waitFor("connection refused")
	p.golden()
}
