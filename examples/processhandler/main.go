// Command processhandler is a process handler for `protctl run node`
// (handler: {process: {command: [...]}}): one long-lived process that reads
// a request per line on stdin and writes a result per line on stdout
// (docs/node-config.md, "process"; docs/decisions/0027-process-handler.md).
//
// It handles each request in a goroutine of its own, so the calls the node
// has in flight (several partitions at once) run concurrently and are
// answered in any order, matched by id. It exits when stdin ends (the node
// stops), after answering what it has started. Replace handle with your
// own code; protctl's benchmarks run it as it is (every event ok).
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
)

// request is one line from the node.
type request struct {
	ID       uint64 `json:"id"`
	Metadata struct {
		Subscription string `json:"subscription"`
		Partition    string `json:"partition"`
		Position     string `json:"position"`
		Attempt      int    `json:"attempt"`
		Aggregate    string `json:"aggregate"`
	} `json:"metadata"`
	Envelope json.RawMessage `json:"envelope"`
}

// result is one line to the node: result is ok, error (this event cannot
// be handled: retried, then its aggregate parked) or retry (a dependency
// is down: the partition backs off and retries later, nothing is parked).
type result struct {
	ID     uint64 `json:"id"`
	Result string `json:"result"`
	Error  string `json:"error,omitempty"`
}

// errRetry marks a failure that is not the event's fault.
var errRetry = errors.New("try again later")

// handle processes one event.
func handle(r request) error {
	var env struct {
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(r.Envelope, &env); err != nil {
		return fmt.Errorf("not an envelope: %w", err)
	}
	return nil
}

func main() {
	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	var wg sync.WaitGroup
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 64<<10), 64<<20) // the largest envelope, plus metadata
	for in.Scan() {
		var r request
		if err := json.Unmarshal(in.Bytes(), &r); err != nil {
			fmt.Fprintln(os.Stderr, "processhandler: bad request:", err)
			os.Exit(2) // the node restarts the process and retries
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := result{ID: r.ID, Result: "ok"}
			if err := handle(r); errors.Is(err, errRetry) {
				res.Result, res.Error = "retry", err.Error()
			} else if err != nil {
				res.Result, res.Error = "error", err.Error()
			}
			line, _ := json.Marshal(res)
			mu.Lock()
			defer mu.Unlock()
			out.Write(append(line, '\n'))
			out.Flush()
		}()
	}
	wg.Wait()
}
