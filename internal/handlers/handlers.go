// Package handlers provides the handlers `protctl run node` configures
// without Go code: Exec runs a command per message, HTTP posts each message
// to a URL, and Log prints it. Each is a runtime.Handler and classifies its
// failures for the runtime (see runtime.Classify):
//
//	            ok        systemic (pause, retry later)     aggregate (retry, then park)
//	exec        exit 0    exit 75 (EX_TEMPFAIL), cannot      any other exit, killed by a
//	                      start the command, a timeout       signal, a timeout
//	                      while the node is out of exec
//	                      slots (Slots)
//	http        2xx       429, 5xx, timeout, connection      other 4xx, 3xx (redirects are
//	                      errors                             not followed)
//
// A handler called with a context that ends (the lease was lost, or the
// node stops hard) stops the work (the exec process group is killed, the
// request cancelled) and reports a systemic failure, which the runtime
// ignores: the message stays pending for the next owner.
package handlers

import (
	"encoding/json"
	"strconv"
	"sync"

	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/source"
)

// Environment variables an exec handler's command receives (HTTP handlers
// get the same values as X-Protctl-* headers).
const (
	EnvSubscription = "PROTCTL_SUBSCRIPTION" // the subscription's name
	EnvPartition    = "PROTCTL_PARTITION"    // the Redis partition key, or the Kafka partition number
	EnvPosition     = "PROTCTL_POSITION"     // the Redis entry id, or the Kafka offset
	EnvGeneration   = "PROTCTL_GENERATION"   // the lease generation the message is handled under
	EnvAttempt      = "PROTCTL_ATTEMPT"      // 1 for the first delivery to this handler
	EnvSource       = "PROTCTL_SOURCE"       // redis or kafka
	EnvCategory     = "PROTCTL_CATEGORY"     // Redis: the entry's category
	EnvStream       = "PROTCTL_STREAM"       // Redis: the lane's stream
	EnvTopic        = "PROTCTL_TOPIC"        // Kafka: the topic
	EnvKey          = "PROTCTL_KEY"          // the partition key (Redis) or record key (Kafka)
	EnvAggregate    = "PROTCTL_AGGREGATE"    // the unit of ordering and parking
)

// ExitTempFail is the exit status (EX_TEMPFAIL) by which an exec
// handler's command reports a systemic failure: try again later.
const ExitTempFail = 75

// metadata lists a message's metadata as (name, value) pairs of the
// environment variables above; empty values are left out.
func metadata(m runtime.Message) [][2]string {
	partition := m.Key
	if m.Source == source.Kafka {
		partition = strconv.Itoa(int(m.Partition))
	}
	all := [][2]string{
		{EnvSubscription, m.Subscription},
		{EnvPartition, partition},
		{EnvPosition, m.Position},
		{EnvGeneration, strconv.FormatInt(m.Generation, 10)},
		{EnvAttempt, strconv.Itoa(m.Attempt)},
		{EnvSource, string(m.Source)},
		{EnvCategory, m.Category},
		{EnvStream, m.Stream},
		{EnvTopic, m.Topic},
		{EnvKey, m.Key},
		{EnvAggregate, m.Aggregate},
	}
	out := all[:0]
	for _, kv := range all {
		if kv[1] != "" {
			out = append(out, kv)
		}
	}
	return out
}

// messageAttrs returns the attributes that name m in a log line (the
// subscription, the partition and, for Kafka, the aggregate, the position,
// the attempt, and the envelope's event id when it has one) followed by
// more. Handlers get a logger without these attributes and add them per
// line: a logger that had them already would repeat them.
func messageAttrs(m runtime.Message, more ...any) []any {
	attrs := make([]any, 0, 12+len(more))
	attrs = append(attrs, "subscription", m.Subscription)
	if m.Source == source.Kafka {
		attrs = append(attrs, "topic", m.Topic, "partition", m.Partition, "aggregate", m.Aggregate)
	} else {
		attrs = append(attrs, "partition", m.Key)
	}
	attrs = append(attrs, "position", m.Position, "attempt", m.Attempt)
	if id := eventID(m.Data); id != "" {
		attrs = append(attrs, "event", id)
	}
	return append(attrs, more...)
}

// eventID returns the id of a Protean envelope (metadata.headers.id, or
// metadata.id), "" for anything else. It parses the envelope: call it on
// failures and debug lines only.
func eventID(data []byte) string {
	var env struct {
		Metadata struct {
			ID      any `json:"id"`
			Headers struct {
				ID any `json:"id"`
			} `json:"headers"`
		} `json:"metadata"`
	}
	if len(data) == 0 || data[0] != '{' || json.Unmarshal(data, &env) != nil {
		return ""
	}
	for _, v := range []any{env.Metadata.Headers.ID, env.Metadata.ID} {
		switch id := v.(type) {
		case string:
			if id != "" {
				return id
			}
		case float64:
			return strconv.FormatFloat(id, 'f', -1, 64)
		}
	}
	return ""
}

// tail keeps the last n bytes written to it. It is safe for concurrent
// use.
type tail struct {
	mu  sync.Mutex
	n   int
	buf []byte
	cut bool
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.n {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.n:]...)
		t.cut = true
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cut {
		return "…" + string(t.buf)
	}
	return string(t.buf)
}
