package handlers

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"sync"

	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/source"
)

// Log prints one line per message and always succeeds:
//
//	<subscription> <category or topic>/<partition> <position> gen=<g> attempt=<n> [<envelope>]
//
// It is safe for concurrent use (lines never interleave).
type Log struct {
	mu      sync.Mutex
	w       io.Writer
	payload bool
}

// NewLog returns a log handler writing to w; payload adds the envelope.
func NewLog(w io.Writer, payload bool) *Log { return &Log{w: w, payload: payload} }

// Handle prints m.
func (l *Log) Handle(_ context.Context, m runtime.Message) error {
	where := m.Category + "/" + m.Key
	if m.Source == source.Kafka {
		where = m.Topic + "/" + strconv.Itoa(int(m.Partition)) + " " + m.Aggregate
	}
	line := fmt.Sprintf("%s %s %s gen=%d attempt=%d", m.Subscription, where, m.Position, m.Generation, m.Attempt)
	if l.payload {
		line += " " + string(m.Data)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = io.WriteString(l.w, line+"\n")
	return nil
}
