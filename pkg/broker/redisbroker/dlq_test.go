package redisbroker_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
)

// rawDigest reads entry id of stream as the server returns its fields, in
// order, and digests them as a plan does.
func rawDigest(t *testing.T, c redis.UniversalClient, stream, id string) string {
	t.Helper()
	flat := rawFields(t, c, stream, id)
	if flat == nil {
		t.Fatalf("no entry %s in %s", id, stream)
	}
	return redisbroker.EntryDigest(flat)
}

func rawFields(t *testing.T, c redis.UniversalClient, stream, id string) []string {
	t.Helper()
	v, err := c.Do(t.Context(), "XRANGE", stream, id, id).Slice()
	if err != nil {
		t.Fatal(err)
	}
	if len(v) == 0 {
		return nil
	}
	var flat []string
	for _, f := range v[0].([]any)[1].([]any) {
		flat = append(flat, f.(string))
	}
	return flat
}

// The script splices the metadata into the original bytes, as the Go copy
// (broker.DeadLetterEntry) does: numbers beyond a double, an empty object,
// blanks and a brace inside a string survive.
func TestDeadLetterScriptKeepsTheOriginalBytes(t *testing.T) {
	b, c := newBroker(t)
	st, dlq := layout.Stream(cat, key), layout.DLQStream(cat, key)
	datas := []string{`{"z":12345678901234567890,"a":0.10000000000000000555}`, ` {} `, "{\"s\":\"}\"}\n", `[1,2]`, `{"x":1`}
	var ids []string
	for _, d := range datas {
		id, err := b.PublishPartitioned(t.Context(), cat, key, "", []byte(d))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	l := acquire(t, b, key, owner, time.Minute)
	if _, err := b.ReadPartitionFenced(t.Context(), l.Fence, st, group, 10, broker.ReadNew); err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		did, err := b.DeadLetterPartitionFenced(t.Context(), l.Fence, st, group, id, dlq, "r")
		if err != nil {
			t.Fatal(err)
		}
		got := rawFields(t, c, dlq, did)
		want := broker.DeadLetterEntry([]byte(datas[i]), false, broker.DeadLetterMetadata{})
		if len(got) != 2*len(want) {
			t.Fatalf("%q: dead letter %q, want the fields of %q", datas[i], got, want)
		}
		for j, f := range want {
			if got[2*j] != f[0] {
				t.Fatalf("%q: field %d is %q, want %q", datas[i], j, got[2*j], f[0])
			}
			// Up to the metadata, the bytes are the Go copy's.
			gv, wv := got[2*j+1], f[1]
			if k := strings.Index(wv, `"_dlq_metadata":`); k >= 0 && f[0] == broker.DataField {
				gv, wv = gv[:min(k, len(gv))], wv[:k]
			} else if f[0] == broker.DLQMetadataKey {
				gv, wv = "", ""
			}
			if gv != wv {
				t.Fatalf("%q: field %s = %q, want %q", datas[i], f[0], got[2*j+1], f[1])
			}
		}
		if got[0] == broker.DataField && len(got) == 2 && !json.Valid([]byte(got[1])) {
			t.Fatalf("%q: the dead letter's data is not JSON: %s", datas[i], got[1])
		}
	}
}

func deadLetter(t *testing.T, b *redisbroker.Broker, n int) (dlq string, ids []string) {
	t.Helper()
	st := layout.Stream(cat, key)
	dlq = layout.DLQStream(cat, key)
	pub := publish(t, b, key, "", n)
	l := acquire(t, b, key, owner, time.Minute)
	if _, err := b.ReadPartitionFenced(t.Context(), l.Fence, st, group, int64(n), broker.ReadNew); err != nil {
		t.Fatal(err)
	}
	for _, id := range pub {
		did, err := b.DeadLetterPartitionFenced(t.Context(), l.Fence, st, group, id, dlq, "poison")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, did)
	}
	if _, err := b.ReleasePartitionLease(t.Context(), l.Fence); err != nil {
		t.Fatal(err)
	}
	return dlq, ids
}

func TestReplayDeadLetterMovesItOnce(t *testing.T) {
	for _, l := range []broker.Layout{broker.ProteanLayout, broker.ClusterLayout} {
		t.Run(l.String(), func(t *testing.T) {
			b, c := newBroker(t, redisbroker.WithLayout(l))
			st, dlq := l.Stream(cat, key), l.DLQStream(cat, key)
			pub, err := b.PublishPartitioned(t.Context(), cat, key, "", []byte(`{"n":0}`))
			if err != nil {
				t.Fatal(err)
			}
			lease, _, _ := b.AcquirePartitionLease(t.Context(), l.LeaseKey(group, key), l.GenerationKey(group, key), owner, time.Minute)
			if _, err := b.ReadPartitionFenced(t.Context(), lease.Fence, st, group, 1, broker.ReadNew); err != nil {
				t.Fatal(err)
			}
			did, err := b.DeadLetterPartitionFenced(t.Context(), lease.Fence, st, group, pub, dlq, "poison")
			if err != nil {
				t.Fatal(err)
			}
			newer, _ := b.PublishPartitioned(t.Context(), cat, key, "", []byte(`{"n":1}`))
			// A reap or a consumer could have taken the key out of the index.
			if err := c.SRem(t.Context(), l.IndexKey(cat), key).Err(); err != nil {
				t.Fatal(err)
			}
			sub := c.Subscribe(t.Context(), l.WakeChannel(cat))
			defer sub.Close()
			if _, err := sub.Receive(t.Context()); err != nil {
				t.Fatal(err)
			}
			digest := rawDigest(t, c, dlq, did)
			r := redisbroker.DeadLetterReplay{DLQStream: dlq, ID: did, Digest: digest, Stream: st, Category: cat, Key: key,
				Fields: [][2]string{{broker.DataField, `{"n":0,"_replayed_from":{}}`}}}

			if v, _, err := b.ReplayDeadLetter(t.Context(), redisbroker.DeadLetterReplay{DLQStream: dlq, ID: did, Digest: "other",
				Stream: st, Category: cat, Key: key, Fields: r.Fields}); err != nil || v != redisbroker.ReplayChanged {
				t.Fatalf("replay with another digest = %s, %v", v, err)
			}
			v, id, err := b.ReplayDeadLetter(t.Context(), r)
			if err != nil || v != redisbroker.ReplayDone {
				t.Fatalf("replay = %s %s, %v", v, id, err)
			}
			all := c.XRange(t.Context(), st, "-", "+").Val()
			if len(all) != 3 || all[1].ID != newer || all[2].ID != id || all[2].Values["data"] != `{"n":0,"_replayed_from":{}}` {
				t.Fatalf("stream after the replay = %+v, want it after %s", all, newer)
			}
			if n := c.XLen(t.Context(), dlq).Val(); n != 0 {
				t.Fatalf("the dead letter is still there (%d)", n)
			}
			if ok := c.SIsMember(t.Context(), l.IndexKey(cat), key).Val(); !ok {
				t.Fatal("the key is not back in the index")
			}
			msg, err := sub.ReceiveMessage(t.Context())
			if err != nil || msg.Payload != key {
				t.Fatalf("wake = %v, %v", msg, err)
			}
			// Applied again: already done, as the same id, nothing appended.
			if v, again, err := b.ReplayDeadLetter(t.Context(), r); err != nil || v != redisbroker.ReplayAlready || again != id {
				t.Fatalf("second replay = %s %s, %v; want already as %s", v, again, err, id)
			}
			if n := c.XLen(t.Context(), st).Val(); n != 3 {
				t.Fatalf("the second replay appended: %d entries", n)
			}
			if ttl := c.PTTL(t.Context(), dlq+redisbroker.ReplayedMarkerSuffix).Val(); ttl <= 0 || ttl > redisbroker.ReplayedMemory {
				t.Fatalf("marker TTL %s", ttl)
			}
			// Forgotten: gone.
			c.Del(t.Context(), dlq+redisbroker.ReplayedMarkerSuffix)
			if v, _, err := b.ReplayDeadLetter(t.Context(), r); err != nil || v != redisbroker.ReplayGone {
				t.Fatalf("replay once forgotten = %s, %v", v, err)
			}
		})
	}
}

func TestReplayDeadLetterRefuses(t *testing.T) {
	b, c := newBroker(t)
	dlq, ids := deadLetter(t, b, 1)
	digest := rawDigest(t, c, dlq, ids[0])
	good := redisbroker.DeadLetterReplay{DLQStream: dlq, ID: ids[0], Digest: digest, Stream: layout.Stream(cat, key), Category: cat, Key: key,
		Fields: [][2]string{{"data", "x"}}}
	for name, mod := range map[string]func(*redisbroker.DeadLetterReplay){
		"into its own stream": func(r *redisbroker.DeadLetterReplay) { r.Stream = r.DLQStream },
		"without fields":      func(r *redisbroker.DeadLetterReplay) { r.Fields = nil },
		"a bad id":            func(r *redisbroker.DeadLetterReplay) { r.ID = "x" },
		"a bad key":           func(r *redisbroker.DeadLetterReplay) { r.Key = "a:b" },
	} {
		r := good
		mod(&r)
		if _, _, err := b.ReplayDeadLetter(t.Context(), r); !errors.Is(err, broker.ErrInvalidArgument) {
			t.Errorf("%s: %v, want an invalid argument", name, err)
		}
	}
	cb := redisbroker.New(c, redisbroker.WithLayout(broker.ClusterLayout))
	cr := good
	cr.Key, cr.DLQStream, cr.Stream = "", cat+":dlq", cat
	if _, _, err := cb.ReplayDeadLetter(t.Context(), cr); !errors.Is(err, broker.ErrInvalidArgument) {
		t.Errorf("a category dead letter in the cluster layout: %v", err)
	}
	// A destination of the wrong type: nothing changes.
	c.Set(t.Context(), "wrong", "x", 0)
	r := good
	r.Stream = "wrong"
	var wte *broker.WrongTypeError
	if _, _, err := b.ReplayDeadLetter(t.Context(), r); !errors.As(err, &wte) || wte.Key != "wrong" {
		t.Fatalf("wrong-type destination: %v", err)
	}
	if n := c.XLen(t.Context(), dlq).Val(); n != 1 {
		t.Fatalf("the dead letter moved: %d left", n)
	}
}

func TestDeleteDeadLetterOnlyAsPlanned(t *testing.T) {
	b, c := newBroker(t)
	dlq, ids := deadLetter(t, b, 3)
	d0 := rawDigest(t, c, dlq, ids[0])
	if v, err := b.DeleteDeadLetter(t.Context(), dlq, ids[1], d0); err != nil || v != redisbroker.DeleteChanged {
		t.Fatalf("delete with another entry's digest = %s, %v", v, err)
	}
	if v, err := b.DeleteDeadLetter(t.Context(), dlq, ids[0], d0); err != nil || v != redisbroker.DeleteDone {
		t.Fatalf("delete = %s, %v", v, err)
	}
	if v, err := b.DeleteDeadLetter(t.Context(), dlq, ids[0], d0); err != nil || v != redisbroker.DeleteGone {
		t.Fatalf("delete again = %s, %v", v, err)
	}
	left := c.XRange(t.Context(), dlq, "-", "+").Val()
	if len(left) != 2 || left[0].ID != ids[1] || left[1].ID != ids[2] {
		t.Fatalf("left %v, want %v", left, ids[1:])
	}
	if _, err := b.DeleteDeadLetter(t.Context(), dlq, "nope", d0); !errors.Is(err, broker.ErrInvalidArgument) {
		t.Fatalf("a bad id: %v", err)
	}
}

func TestEntryDigest(t *testing.T) {
	// Lengths keep field boundaries apart.
	if redisbroker.EntryDigest([]string{"ab", "c"}) == redisbroker.EntryDigest([]string{"a", "bc"}) {
		t.Fatal("digests of different entries are equal")
	}
	if got := redisbroker.EntryDigest([]string{"data", "x"}); len(got) != 40 {
		t.Fatalf("digest %q", got)
	}
}
