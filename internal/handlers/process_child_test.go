package handlers_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// The process handler's tests run a real child: this test binary again,
// in child mode (envChildMode set), speaking the protocol on its stdin
// and stdout.
const envChildMode = "PROTCTL_TEST_PROCESS_CHILD"

func TestMain(m *testing.M) {
	if mode := os.Getenv(envChildMode); mode != "" {
		os.Exit(processChild(mode))
	}
	os.Exit(m.Run())
}

// childRequest is what the child reads.
type childRequest struct {
	ID             uint64          `json:"id"`
	Metadata       map[string]any  `json:"metadata"`
	Envelope       json.RawMessage `json:"envelope"`
	EnvelopeBase64 []byte          `json:"envelopeBase64"`
}

// childOrder is what the tests put in an envelope's data to steer the
// child.
type childOrder struct {
	Do      string `json:"do"`      // "", error, retry, crash, hang, garbage
	SleepMS int    `json:"sleepMs"` // before answering
	Stderr  string `json:"stderr"`  // written to stderr first
	Attempt int    `json:"attempt"` // the order applies to this attempt only (0: every)
}

// processChild answers each request in a goroutine of its own (so out of
// order), as its order says; it records every request, one JSON line
// each, in $CHILD_RECORD. Modes: serve; exit-at-start (exits 4 at once);
// ignore-eof (goes on after stdin ends, until killed).
func processChild(mode string) int {
	if mode == "exit-at-start" {
		fmt.Fprintln(os.Stderr, "cannot connect to the database")
		return 4
	}
	var record *os.File
	if p := os.Getenv("CHILD_RECORD"); p != "" {
		f, err := os.OpenFile(p, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		record = f
	}
	var outMu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	reply := func(v any) {
		b, _ := json.Marshal(v)
		outMu.Lock()
		defer outMu.Unlock()
		out.Write(append(b, '\n'))
		out.Flush()
	}
	var wg sync.WaitGroup
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := append([]byte(nil), sc.Bytes()...)
		if record != nil {
			outMu.Lock()
			record.Write(append(line, '\n'))
			outMu.Unlock()
		}
		var req childRequest
		if err := json.Unmarshal(line, &req); err != nil {
			fmt.Fprintln(os.Stderr, "bad request:", err)
			return 2
		}
		var env struct {
			Data childOrder `json:"data"`
		}
		_ = json.Unmarshal(req.Envelope, &env)
		o := env.Data
		if a, _ := req.Metadata["attempt"].(float64); o.Attempt != 0 && int(a) != o.Attempt {
			o = childOrder{}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if o.Stderr != "" {
				fmt.Fprintln(os.Stderr, o.Stderr)
			}
			time.Sleep(time.Duration(o.SleepMS) * time.Millisecond)
			switch o.Do {
			case "crash":
				os.Exit(3)
			case "hang":
				return
			case "garbage":
				outMu.Lock()
				out.WriteString("this is not json\n")
				out.Flush()
				outMu.Unlock()
			case "error", "retry":
				reply(map[string]any{"id": req.ID, "result": o.Do, "error": "told to " + o.Do})
			default:
				reply(map[string]any{"id": req.ID, "result": "ok"})
			}
		}()
	}
	// stdin closed: the node stops. Finish what is in flight, then exit.
	if mode == "ignore-eof" {
		select {}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second): // calls told to hang
	}
	return 0
}

// order is an envelope carrying o for the child.
func order(o childOrder) []byte {
	b, _ := json.Marshal(map[string]any{"data": o, "metadata": map[string]any{"headers": map[string]any{"id": "e-" + o.Do}}})
	return b
}

// childCommand is the command that runs this binary as a child in mode.
func childCommand(t *testing.T, mode string) ([]string, map[string]string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return []string{exe, "-test.run=^$"}, map[string]string{envChildMode: mode}
}

// recorded reads the requests the child recorded.
func recorded(t *testing.T, path string) []childRequest {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []childRequest
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var r childRequest
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		out = append(out, r)
	}
	return out
}
