package testenv

import (
	"encoding/json"
	"fmt"
	"time"
)

// ProteanDeadLetter is a dead letter as Protean's StreamSubscription
// writes it to a category's C:dlq: the message it failed on, with
// _dlq_metadata added (original_stream, original_id, consumer_group,
// consumer, failed_at from the message's header time, retry_count).
type ProteanDeadLetter struct {
	// ID is the dead letter's id; default "*" (the server's clock).
	ID             string
	OriginalStream string // default: the category (an unpartitioned subscription)
	OriginalID     string
	Group          string
	Consumer       string
	RetryCount     int
	// Payload is the message; default an OrderPlaced envelope with seq.
	Payload map[string]any
}

// DeadLetter appends d to the category's C:dlq with plain XADD, as
// Protean does, and returns its id.
func (c *ProteanCategory) DeadLetter(d ProteanDeadLetter) string {
	c.f.t.Helper()
	if d.OriginalStream == "" {
		d.OriginalStream = c.name
	}
	if d.Payload == nil {
		c.f.seq++
		d.Payload = map[string]any{
			"data":     map[string]any{"seq": c.f.seq},
			"metadata": map[string]any{"headers": map[string]any{"id": fmt.Sprintf("evt-%d", c.f.seq), "type": "test.OrderPlaced.v1", "time": time.Now().UTC().Format("2006-01-02T15:04:05.000000")}},
		}
	}
	msg := map[string]any{}
	for k, v := range d.Payload {
		msg[k] = v
	}
	var failedAt any
	if h, ok := d.Payload["metadata"].(map[string]any); ok {
		if hs, ok := h["headers"].(map[string]any); ok {
			failedAt = hs["time"]
		}
	}
	msg["_dlq_metadata"] = map[string]any{
		"original_stream": d.OriginalStream, "original_id": d.OriginalID,
		"consumer_group": d.Group, "consumer": d.Consumer,
		"failed_at": failedAt, "retry_count": d.RetryCount,
	}
	b, err := json.Marshal(msg)
	if err != nil {
		c.f.t.Fatalf("testenv: protean fixture: %v", err)
	}
	if d.ID == "" {
		d.ID = "*"
	}
	v := c.f.do("XADD", c.name+":dlq", d.ID, "data", string(b))
	id, _ := v.(string)
	return id
}

// OldDeadLetter appends a dead letter to the partition's C:K:dlq in the
// format protctl wrote before Protean's (the data field as it was, with
// origin_stream, origin_id, group and reason beside it), with plain XADD
// at id at ("*" for the server's clock), and returns its id.
func (p *ProteanPartition) OldDeadLetter(at, data, originID, group, reason string) string {
	p.c.f.t.Helper()
	v := p.c.f.do("XADD", p.c.f.layout.DLQStream(p.c.name, p.key), at, "data", data,
		"origin_stream", p.c.f.layout.Stream(p.c.name, p.key), "origin_id", originID, "group", group, "reason", reason)
	id, _ := v.(string)
	return id
}
