package memorybroker

import (
	"context"
	"fmt"
	"time"

	"github.com/protctl/protctl/pkg/broker"
)

// Faults corrupts the broker's state the way tools outside protctl or a
// crash do, so that tests can prove what protctl does then. It has the
// methods of brokertest.Faults; it works on inline brokers too.
type Faults struct {
	b *Broker
}

// Faults returns the broker's fault injector.
func (b *Broker) Faults() Faults { return Faults{b: b} }

// DeleteEntry removes entry id from stream without touching any pending
// list (XDEL). A missing stream or entry is not an error.
func (f Faults) DeleteEntry(ctx context.Context, streamKey, id string) error {
	const op = "delete entry"
	if err := ctxErr(ctx, op); err != nil {
		return err
	}
	eid, err := parseID(op, id)
	if err != nil {
		return err
	}
	now := f.b.lock()
	defer f.b.mu.Unlock()
	s, err := f.b.streamAt(op, streamKey, now)
	if err != nil || s == nil {
		return err
	}
	s.del(eid)
	return nil
}

// PutString stores value at key, which must not exist (SET NX).
func (f Faults) PutString(ctx context.Context, key, value string) error {
	const op = "put string"
	if err := ctxErr(ctx, op); err != nil {
		return err
	}
	now := f.b.lock()
	defer f.b.mu.Unlock()
	if f.b.lookup(key, now) != nil {
		return fmt.Errorf("memorybroker: %s: key %q exists", op, key)
	}
	f.b.keys[key] = &object{kind: kindString, str: value}
	return nil
}

// Exists reports whether key holds a value (an expired lease does not).
func (f Faults) Exists(ctx context.Context, key string) (bool, error) {
	if err := ctxErr(ctx, "exists"); err != nil {
		return false, err
	}
	now := f.b.lock()
	defer f.b.mu.Unlock()
	return f.b.lookup(key, now) != nil, nil
}

// TTL returns the time left before key expires, as Redis's PTTL rounds
// it (whole milliseconds); false when key is missing or has no expiry.
func (f Faults) TTL(ctx context.Context, key string) (time.Duration, bool, error) {
	if err := ctxErr(ctx, "ttl"); err != nil {
		return 0, false, err
	}
	now := f.b.lock()
	defer f.b.mu.Unlock()
	o := f.b.lookup(key, now)
	if o == nil || o.expireAt.IsZero() {
		return 0, false, nil
	}
	return o.expireAt.Sub(now).Truncate(time.Millisecond), true, nil
}

// GetString returns key's string value; ("", false) when key is missing.
func (f Faults) GetString(ctx context.Context, key string) (string, bool, error) {
	const op = "get string"
	if err := ctxErr(ctx, op); err != nil {
		return "", false, err
	}
	now := f.b.lock()
	defer f.b.mu.Unlock()
	o, err := f.b.stringAt(op, key, now)
	if err != nil || o == nil {
		return "", false, err
	}
	return o.str, true, nil
}

// CreateGroup creates group on stream at id ("0", "$" for the last
// generated id, or an entry id), creating the stream when missing (XGROUP
// CREATE ... MKSTREAM). Like Redis it refuses an existing group.
func (f Faults) CreateGroup(ctx context.Context, streamKey, group, id string) error {
	const op = "create group"
	if err := firstErr(ctxErr(ctx, op), nonEmpty(op, "stream", streamKey), nonEmpty(op, "group", group)); err != nil {
		return err
	}
	var start broker.StreamID
	if id != "$" {
		var err error
		if start, err = parseID(op, id); err != nil {
			return err
		}
	}
	now := f.b.lock()
	defer f.b.mu.Unlock()
	s, err := f.b.streamAt(op, streamKey, now)
	if err != nil {
		return err
	}
	if s != nil && s.groups[group] != nil {
		return fmt.Errorf("memorybroker: %s: group %q already exists on %q", op, group, streamKey)
	}
	s = f.b.ensureStream(streamKey, s)
	if id == "$" {
		start = s.lastID
	}
	s.groups[group] = newGroup(start)
	return nil
}

// StreamLen returns the number of entries of stream (0 when missing).
func (f Faults) StreamLen(ctx context.Context, streamKey string) (int64, error) {
	const op = "stream length"
	if err := ctxErr(ctx, op); err != nil {
		return 0, err
	}
	now := f.b.lock()
	defer f.b.mu.Unlock()
	s, err := f.b.streamAt(op, streamKey, now)
	if err != nil || s == nil {
		return 0, err
	}
	return int64(len(s.entries)), nil
}

// StreamIDs returns every entry id of stream, oldest first (nil when the
// stream is missing or empty).
func (f Faults) StreamIDs(ctx context.Context, streamKey string) ([]string, error) {
	const op = "stream ids"
	if err := ctxErr(ctx, op); err != nil {
		return nil, err
	}
	now := f.b.lock()
	defer f.b.mu.Unlock()
	s, err := f.b.streamAt(op, streamKey, now)
	if err != nil || s == nil || len(s.entries) == 0 {
		return nil, err
	}
	ids := make([]string, len(s.entries))
	for i := range s.entries {
		ids[i] = s.entries[i].id.String()
	}
	return ids, nil
}

// EntryFields returns the fields of entry id of stream (data included),
// and false when there is no such entry.
func (f Faults) EntryFields(ctx context.Context, streamKey, id string) (map[string]string, bool, error) {
	const op = "entry fields"
	if err := ctxErr(ctx, op); err != nil {
		return nil, false, err
	}
	eid, err := parseID(op, id)
	if err != nil {
		return nil, false, err
	}
	now := f.b.lock()
	defer f.b.mu.Unlock()
	s, err := f.b.streamAt(op, streamKey, now)
	if err != nil || s == nil {
		return nil, false, err
	}
	e, ok := s.find(eid)
	if !ok {
		return nil, false, nil
	}
	out := map[string]string{broker.DataField: string(e.data)}
	for _, fl := range e.fields {
		out[fl.Name] = fl.Value
	}
	return out, true, nil
}

// Consumers returns group's consumers on stream with their pending counts
// (empty when the stream or group is missing).
func (f Faults) Consumers(ctx context.Context, streamKey, group string) (map[string]int64, error) {
	const op = "consumers"
	if err := ctxErr(ctx, op); err != nil {
		return nil, err
	}
	now := f.b.lock()
	defer f.b.mu.Unlock()
	out := map[string]int64{}
	s, err := f.b.streamAt(op, streamKey, now)
	if err != nil || s == nil || s.groups[group] == nil {
		return out, err
	}
	for name, c := range s.groups[group].consumers {
		out[name] = int64(c.npending)
	}
	return out, nil
}
