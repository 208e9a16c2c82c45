package memorybroker_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/memorybroker"
)

func TestEntryIDsFollowTheClockAndNeverGoBack(t *testing.T) {
	f := newFixture(t)
	appendAt := func(stream string) string {
		t.Helper()
		id, err := f.b.Append(f.ctx, stream, []byte("x"))
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	steps := []struct {
		name   string
		move   func()
		stream string
		want   string
	}{
		{"first entry takes the clock's ms", func() {}, "s", "1767323045000-0"},
		{"clock standing still bumps seq", func() {}, "s", "1767323045000-1"},
		{"clock moving on resets seq", func() { f.clock.Advance(time.Millisecond) }, "s", "1767323045001-0"},
		{"sub-millisecond step bumps seq", func() { f.clock.Advance(500 * time.Microsecond) }, "s", "1767323045001-1"},
		{"clock going back bumps seq", func() { f.clock.Set(epoch.Add(-time.Hour)) }, "s", "1767323045001-2"},
		{"another stream has its own ids", func() {}, "t", "1767319445000-0"},
	}
	for _, s := range steps {
		s.move()
		if got := appendAt(s.stream); got != s.want {
			t.Fatalf("%s: id = %s, want %s", s.name, got, s.want)
		}
	}

	// At the Unix epoch the first id is 0-1, never 0-0, as in Redis.
	b := memorybroker.New(memorybroker.WithClock(memorybroker.NewManualClock(time.Unix(0, 0))))
	if id, _ := b.Append(f.ctx, "s", nil); id != "0-1" {
		t.Fatalf("first id at the Unix epoch = %s, want 0-1", id)
	}
}

func TestIDsSurviveDeletionOfTheNewestEntry(t *testing.T) {
	f := newFixture(t)
	ids := f.publish("", 2)
	if err := f.fault.DeleteEntry(f.ctx, f.stream(), ids[1]); err != nil {
		t.Fatal(err)
	}
	next := f.publish("", 1)[0]
	if next != "1767323045000-2" {
		t.Fatalf("id after deleting the newest entry = %s, want 1767323045000-2 (last generated id kept)", next)
	}
}

func TestPendingReadCountsDeliveriesAndReportsMissingBodies(t *testing.T) {
	f := newFixture(t)
	ids := f.publish("", 3)
	l := f.acquire()
	if got := msgIDs(f.read(l.Fence, f.stream(), 10, broker.ReadNew)); !slices.Equal(got, ids) {
		t.Fatalf("new read = %v, want %v", got, ids)
	}
	if again := f.read(l.Fence, f.stream(), 10, broker.ReadNew); again != nil {
		t.Fatalf("second new read = %v, want nothing (delivered already)", again)
	}
	if err := f.fault.DeleteEntry(f.ctx, f.stream(), ids[1]); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(time.Second)

	msgs := f.read(l.Fence, f.stream(), 10, broker.ReadPending)
	if got := msgIDs(msgs); !slices.Equal(got, ids) {
		t.Fatalf("pending read = %v, want %v in id order", got, ids)
	}
	for i, m := range msgs {
		if m.Missing != (i == 1) {
			t.Fatalf("%s: Missing = %v", m.ID, m.Missing)
		}
		if m.Missing && m.Data != nil {
			t.Fatalf("missing entry carries data %q", m.Data)
		}
		if !m.Missing && len(m.Data) == 0 {
			t.Fatalf("entry %s has no data", m.ID)
		}
	}
	// Redis counts a redelivery only for entries whose body exists, and
	// restarts their idle time.
	wantDeliveries := []int64{2, 1, 2}
	wantIdle := []time.Duration{0, time.Second, 0}
	for i, p := range f.pending(f.stream()) {
		if p.Consumer != l.Token || p.Deliveries != wantDeliveries[i] || p.Idle != wantIdle[i] || p.Missing != (i == 1) {
			t.Fatalf("pending[%d] = %+v, want consumer %s, %d deliveries, idle %v", i, p, l.Token, wantDeliveries[i], wantIdle[i])
		}
	}

	if n := f.ack(l.Fence, f.stream(), ids...); n != 3 {
		t.Fatalf("ack of three pending ids (one without body) = %d, want 3", n)
	}
	if n := f.ack(l.Fence, f.stream(), ids[0], ids[0]); n != 0 {
		t.Fatalf("second ack = %d, want 0", n)
	}
	if p := f.pending(f.stream()); p != nil {
		t.Fatalf("pending after ack = %+v", p)
	}
}

func TestReadPendingThenNewDoesNotTopUpWithNewEntries(t *testing.T) {
	f := newFixture(t)
	ids := f.publish("", 3)
	l := f.acquire()
	f.read(l.Fence, f.stream(), 2, broker.ReadNew)
	if got := msgIDs(f.read(l.Fence, f.stream(), 10, broker.ReadPendingThenNew)); !slices.Equal(got, ids[:2]) {
		t.Fatalf("with pending entries: read %v, want only the pending %v", got, ids[:2])
	}
	f.ack(l.Fence, f.stream(), ids[:2]...)
	if got := msgIDs(f.read(l.Fence, f.stream(), 10, broker.ReadPendingThenNew)); !slices.Equal(got, ids[2:]) {
		t.Fatalf("without pending entries: read %v, want the new %v", got, ids[2:])
	}
}

func TestReadCreatesStreamAndGroupFromTheBeginning(t *testing.T) {
	f := newFixture(t)
	l := f.acquire()
	if msgs := f.read(l.Fence, f.stream(), 10, broker.ReadPending); msgs != nil {
		t.Fatalf("read of a missing stream = %v", msgs)
	}
	info, found, err := f.b.StreamInfo(f.ctx, f.stream())
	if err != nil || !found {
		t.Fatalf("stream info: found=%v err=%v (MKSTREAM should have created it)", found, err)
	}
	if len(info.Groups) != 1 || info.Groups[0].Name != group || info.Groups[0].LastDeliveredID != "0-0" {
		t.Fatalf("groups = %+v, want %s from 0-0", info.Groups, group)
	}
	ids := f.publish("", 2)
	if got := msgIDs(f.read(l.Fence, f.stream(), 10, broker.ReadNew)); !slices.Equal(got, ids) {
		t.Fatalf("read = %v, want %v", got, ids)
	}
}

func TestReclaimMovesIdleEntriesLikeXAUTOCLAIMJustID(t *testing.T) {
	f := newFixture(t)
	ids := f.publish("", 4)
	old := f.acquireAs("node-a", time.Second)
	f.read(old.Fence, f.stream(), 3, broker.ReadNew) // ids[0..2] pending for generation 1
	f.clock.Advance(2 * time.Second)                 // generation 1's lease expires
	cur := f.acquireAs("node-b", time.Hour)
	f.read(cur.Fence, f.stream(), 1, broker.ReadNew) // ids[3] pending for generation 2, idle 0
	if err := f.fault.DeleteEntry(f.ctx, f.stream(), ids[1]); err != nil {
		t.Fatal(err)
	}

	res, err := f.b.ReclaimPartitionPending(f.ctx, cur.Fence, f.stream(), group, 3*time.Second, 10)
	if err != nil || res.Claimed != 0 || res.Missing != nil {
		t.Fatalf("reclaim with minIdle above every idle time = %+v, %v; want nothing", res, err)
	}
	res, err = f.b.ReclaimPartitionPending(f.ctx, cur.Fence, f.stream(), group, 2*time.Second, 1)
	if err != nil {
		t.Fatal(err)
	}
	if res.Claimed != 2 || !slices.Equal(res.Missing, []string{ids[1]}) {
		t.Fatalf("reclaim = %+v, want 2 claimed (across batches of 1) and %s missing", res, ids[1])
	}
	p := f.pending(f.stream())
	if len(p) != 3 {
		t.Fatalf("pending = %+v, want ids 0, 2, 3 (the missing one dropped)", p)
	}
	for _, e := range p {
		// JUSTID: the delivery count stays, the idle time restarts.
		if e.Consumer != cur.Token || e.Deliveries != 1 || e.Idle != 0 {
			t.Fatalf("pending %+v, want consumer %s, 1 delivery, idle 0", e, cur.Token)
		}
	}
	if got := msgIDs(f.read(cur.Fence, f.stream(), 10, broker.ReadPending)); !slices.Equal(got, []string{ids[0], ids[2], ids[3]}) {
		t.Fatalf("new owner's pending read = %v", got)
	}
	info, _, _ := f.b.StreamInfo(f.ctx, f.stream())
	for _, c := range info.Groups[0].Consumers {
		if c.Name == old.Token && c.Pending != 0 {
			t.Fatalf("old generation still holds %d entries", c.Pending)
		}
	}
}

func TestReclaimComparesIdleTimesInWholeMilliseconds(t *testing.T) {
	f := newFixture(t)
	f.publish("", 1)
	l := f.acquire()
	f.read(l.Fence, f.stream(), 1, broker.ReadNew)
	f.clock.Advance(999 * time.Microsecond)
	// 1ns rounds up to 1ms, and the entry is 0ms idle on a ms clock.
	if res, _ := f.b.ReclaimPartitionPending(f.ctx, l.Fence, f.stream(), group, time.Nanosecond, 10); res.Claimed != 0 {
		t.Fatalf("claimed %d entries idle for 0ms with minIdle 1ms", res.Claimed)
	}
	f.clock.Advance(time.Microsecond)
	if res, _ := f.b.ReclaimPartitionPending(f.ctx, l.Fence, f.stream(), group, time.Nanosecond, 10); res.Claimed != 1 {
		t.Fatalf("claimed %d entries idle for 1ms with minIdle 1ms, want 1", res.Claimed)
	}
}

func TestStaleTokenIsRefusedAndChangesNothing(t *testing.T) {
	f := newFixture(t)
	ids := f.publish("", 3)
	old := f.acquireAs("node-a", time.Second)
	f.read(old.Fence, f.stream(), 2, broker.ReadNew)
	f.clock.Advance(time.Second) // the TTL has fully run: expired
	f.acquireAs("node-b", time.Hour)
	before := memorybroker.Dump(f.b)

	calls := map[string]func() error{
		"read": func() error {
			_, err := f.b.ReadPartitionFenced(f.ctx, old.Fence, f.stream(), group, 10, broker.ReadPendingThenNew)
			return err
		},
		"ack": func() error {
			_, err := f.b.AckPartitionFenced(f.ctx, old.Fence, f.stream(), group, ids...)
			return err
		},
		"reclaim": func() error {
			_, err := f.b.ReclaimPartitionPending(f.ctx, old.Fence, f.stream(), group, 0, 10)
			return err
		},
		"dead-letter": func() error {
			_, err := f.b.DeadLetterPartitionFenced(f.ctx, old.Fence, f.stream(), group, ids[0], f.l.DLQStream(cat, key), "poison")
			return err
		},
	}
	for op, call := range calls {
		err := call()
		var lle *broker.LeaseLostError
		if !errors.Is(err, broker.ErrLeaseLost) || !errors.As(err, &lle) {
			t.Fatalf("%s with a stale token: err = %v, want a *LeaseLostError", op, err)
		}
		if lle.Op != op || lle.Stream != f.stream() || lle.Token != old.Token || lle.LeaseKey != old.LeaseKey {
			t.Fatalf("%s: %+v does not name the call", op, lle)
		}
		if after := memorybroker.Dump(f.b); after != before {
			t.Fatalf("refused %s changed the state:\nbefore:\n%s\nafter:\n%s", op, before, after)
		}
	}
}

func TestDeadLetterCopiesTheEntryWithItsOrigin(t *testing.T) {
	f := newFixture(t)
	ids := f.publish("", 2)
	l := f.acquire()
	f.read(l.Fence, f.stream(), 2, broker.ReadNew)
	if err := f.fault.DeleteEntry(f.ctx, f.stream(), ids[1]); err != nil {
		t.Fatal(err)
	}
	dlq := f.l.DLQStream(cat, key)
	for _, id := range ids {
		if _, err := f.b.DeadLetterPartitionFenced(f.ctx, l.Fence, f.stream(), group, id, dlq, "poison"); err != nil {
			t.Fatal(err)
		}
	}
	if p := f.pending(f.stream()); p != nil {
		t.Fatalf("dead-lettered entries still pending: %+v", p)
	}
	entries, err := f.b.Range(f.ctx, dlq, "-", 10)
	if err != nil || len(entries) != 2 {
		t.Fatalf("dead letters = %+v, %v", entries, err)
	}
	// "a" is not a JSON object: kept as it was, the metadata beside it.
	// The second body was gone: the metadata alone, as a JSON object.
	if string(entries[0].Data) != "a" || len(entries[0].Fields) != 1 || entries[0].Fields[0].Name != broker.DLQMetadataKey {
		t.Fatalf("dead letter 0 = %q %v, want the original data and a _dlq_metadata field", entries[0].Data, entries[0].Fields)
	}
	if len(entries[1].Fields) != 0 {
		t.Fatalf("dead letter 1 fields = %v, want none", entries[1].Fields)
	}
	for i, e := range entries {
		fields := map[string]string{broker.DataField: string(e.Data)}
		for _, fl := range e.Fields {
			fields[fl.Name] = fl.Value
		}
		d := broker.ParseDeadLetter(fields)
		if d.OriginalStream != f.stream() || d.OriginalID != ids[i] || d.ConsumerGroup != group ||
			d.Consumer != l.Fence.Token || d.FailureReason != "poison" || d.RetryCount == nil || *d.RetryCount != 1 ||
			d.Missing != (i == 1) {
			t.Fatalf("dead letter %d reads as %+v", i, d)
		}
		if _, ok := broker.ParseFailedAt(d.FailedAt); !ok {
			t.Fatalf("dead letter %d failed_at %q", i, d.FailedAt)
		}
	}
	_, err = f.b.DeadLetterPartitionFenced(f.ctx, l.Fence, f.stream(), group, ids[0], f.stream(), "loop")
	wantInvalid(t, err, "dlqStream")
}

func TestReturnedDataIsACopy(t *testing.T) {
	f := newFixture(t)
	data := []byte("original")
	if _, err := f.b.PublishPartitioned(f.ctx, cat, key, "", data); err != nil {
		t.Fatal(err)
	}
	data[0] = 'X'
	l := f.acquire()
	msgs := f.read(l.Fence, f.stream(), 1, broker.ReadNew)
	msgs[0].Data[1] = 'Y'
	again := f.read(l.Fence, f.stream(), 1, broker.ReadPending)
	if string(again[0].Data) != "original" {
		t.Fatalf("stored data = %q: the broker shares memory with its callers", again[0].Data)
	}
}
