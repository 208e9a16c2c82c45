package output

import (
	"strings"
	"testing"
	"time"
)

func TestProgressOnlyOnATerminal(t *testing.T) {
	ios, _, out, errOut := Test()
	p := ios.NewProgress("scanning")
	p.Update("%d keys", 10)
	p.Done()
	if errOut.Len() != 0 || out.Len() != 0 {
		t.Fatalf("progress without a terminal must print nothing: %q", errOut)
	}

	ios.SetStderrTTY(true)
	p = ios.NewProgress("scanning")
	now := time.Unix(0, 0)
	p.now = func() time.Time { return now }
	p.Update("%d keys", 10)
	p.Update("%d keys", 20) // too soon: dropped
	now = now.Add(progressInterval)
	p.Update("%d keys", 30)
	p.Done()
	got := errOut.String()
	if !strings.Contains(got, "scanning: 10 keys") || strings.Contains(got, "20 keys") || !strings.Contains(got, "scanning: 30 keys") {
		t.Fatalf("progress: %q", got)
	}
	if !strings.HasSuffix(got, "\r\x1b[K") || out.Len() != 0 {
		t.Fatalf("Done must clear the line, stdout must stay empty: %q", got)
	}
}

func TestProgressTruncatesToTheWidth(t *testing.T) {
	ios, _, _, errOut := Test()
	ios.SetStderrTTY(true)
	ios.SetTerminalWidth(20)
	p := ios.NewProgress("scanning")
	p.Update("%s", strings.Repeat("x", 100))
	line := strings.TrimPrefix(errOut.String(), "\r\x1b[K")
	if displayWidth(line) > 19 {
		t.Fatalf("line %q is wider than the terminal", line)
	}
}
