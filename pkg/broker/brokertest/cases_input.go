package brokertest

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/protctl/protctl/pkg/broker"
)

var inputCases = []Case{
	{"InvalidPartitionKeysAreRefusedAndChangeNothing", func(t *testing.T, s *Suite) {
		for _, bad := range []string{"", "a:b", "dlq", broker.DefaultBackfillSuffix, "__x__", strings.Repeat("k", broker.MaxKeyLen+1)} {
			_, err := s.B.PublishPartitioned(s.Ctx, cat, bad, "", payload("x", 0))
			wantErrIs(t, "publish to key "+bad, err, broker.ErrInvalidArgument)
			err = s.B.RecordPartition(s.Ctx, cat, bad)
			wantErrIs(t, "record key "+bad, err, broker.ErrInvalidArgument)
		}
		if ks := s.keys(t); len(ks) != 0 {
			t.Fatalf("refused keys reached the index: %v", ks)
		}
		// The longest valid key is accepted.
		if _, err := s.B.PublishPartitioned(s.Ctx, cat, strings.Repeat("k", broker.MaxKeyLen), "", payload("x", 0)); err != nil {
			t.Fatalf("a %d-byte key was refused: %v", broker.MaxKeyLen, err)
		}
	}},
	{"InvalidArgumentsAreRefused", func(t *testing.T, s *Suite) {
		lk, gk := s.L.LeaseKey(group, key), s.L.GenerationKey(group, key)
		_, _, err := s.B.AcquirePartitionLease(s.Ctx, lk, gk, owner, 0)
		wantErrIs(t, "acquire with ttl 0", err, broker.ErrInvalidArgument)
		_, _, err = s.B.AcquirePartitionLease(s.Ctx, lk, gk, "", long)
		wantErrIs(t, "acquire with no owner", err, broker.ErrInvalidArgument)
		if s.exists(t, gk) || s.exists(t, lk) {
			t.Fatal("a refused acquire wrote the lease or generation")
		}
		l := s.acquire(t, key, owner, long)
		_, err = s.B.ReadPartitionFenced(s.Ctx, l.Fence, s.stream(key), group, 0, broker.ReadNew)
		wantErrIs(t, "read with count 0", err, broker.ErrInvalidArgument)
		_, err = s.B.ReadPartitionFenced(s.Ctx, l.Fence, s.stream(key), "", 1, broker.ReadNew)
		wantErrIs(t, "read with no group", err, broker.ErrInvalidArgument)
		_, err = s.B.ReclaimPartitionPending(s.Ctx, l.Fence, s.stream(key), group, 0, 0)
		wantErrIs(t, "reclaim with count 0", err, broker.ErrInvalidArgument)
		_, err = s.B.RenewPartitionLease(s.Ctx, l.Fence, -time.Second)
		wantErrIs(t, "renew with a negative ttl", err, broker.ErrInvalidArgument)
		_, err = s.B.PartitionKeys(s.Ctx, "")
		wantErrIs(t, "keys of an empty category", err, broker.ErrInvalidArgument)
		_, err = s.B.PublishPartitioned(s.Ctx, cat, key, broker.DLQSuffix, payload(key, 0))
		wantErrIs(t, "publish to the dlq lane", err, broker.ErrInvalidArgument)
		if s.exists(t, s.stream(key)) {
			t.Fatal("a refused call created the stream")
		}
	}},
	{"WrongTypeIndexKeyIsRefusedAndChangesNothing", func(t *testing.T, s *Suite) {
		idx := s.L.IndexKey(cat)
		if err := s.faults.PutString(s.Ctx, idx, "not-a-set"); err != nil {
			t.Fatal(err)
		}
		err := s.B.RecordPartition(s.Ctx, cat, key)
		wantErrIs(t, "record into a string", err, broker.ErrWrongType)
		_, err = s.B.PartitionKeys(s.Ctx, cat)
		wantErrIs(t, "keys of a string", err, broker.ErrWrongType)
		_, _, err = s.B.ScanPartitionKeys(s.Ctx, cat, 0, 10)
		wantErrIs(t, "scan of a string", err, broker.ErrWrongType)
		_, err = s.B.PublishPartitioned(s.Ctx, cat, key, "", payload(key, 0))
		wantErrIs(t, "publish with a string index", err, broker.ErrWrongType)
		var wte *broker.WrongTypeError
		if !errorsAs(err, &wte) || wte.Key != idx {
			t.Fatalf("wrong-type error %v does not name %s", err, idx)
		}
		if s.exists(t, s.stream(key)) {
			t.Fatal("a refused publish appended to the stream")
		}
		if v, _, _ := s.faults.GetString(s.Ctx, idx); v != "not-a-set" {
			t.Fatalf("the string under the index key changed to %q", v)
		}
	}},
	{"WrongTypeStreamKeyIsRefusedAndChangesNothing", func(t *testing.T, s *Suite) {
		st := s.stream(key)
		if err := s.faults.PutString(s.Ctx, st, "not-a-stream"); err != nil {
			t.Fatal(err)
		}
		_, err := s.B.PublishPartitioned(s.Ctx, cat, key, "", payload(key, 0))
		wantErrIs(t, "publish into a string", err, broker.ErrWrongType)
		if ks := s.keys(t); len(ks) != 0 {
			t.Fatalf("a refused publish recorded %v", ks)
		}
		l := s.acquire(t, key, owner, long)
		_, err = s.B.ReadPartitionFenced(s.Ctx, l.Fence, st, group, 10, broker.ReadPendingThenNew)
		wantErrIs(t, "read of a string", err, broker.ErrWrongType)
		_, err = s.B.Trim(s.Ctx, st, 5)
		wantErrIs(t, "trim of a string", err, broker.ErrWrongType)
		if err := s.B.RecordPartition(s.Ctx, cat, key); err != nil {
			t.Fatal(err)
		}
		_, err = s.B.ReapPartition(s.Ctx, cat, key, 0, "")
		wantErrIs(t, "reap of a string", err, broker.ErrWrongType)
		if v, _, _ := s.faults.GetString(s.Ctx, st); v != "not-a-stream" {
			t.Fatalf("the string under the stream key changed to %q", v)
		}
		if ks := s.keys(t); !slices.Equal(ks, []string{key}) {
			t.Fatalf("a refused reap changed the index to %v", ks)
		}
	}},
	{"WrongTypeGroupRegistryIsRefused", func(t *testing.T, s *Suite) {
		if err := s.faults.PutString(s.Ctx, s.L.GroupsKey(cat), "x"); err != nil {
			t.Fatal(err)
		}
		err := s.B.RegisterGroup(s.Ctx, cat, group)
		wantErrIs(t, "register into a string", err, broker.ErrWrongType)
		s.publish(t, key, "", 1)
		_, err = s.B.ReapPartition(s.Ctx, cat, key, 0, "")
		wantErrIs(t, "reap with a string registry", err, broker.ErrWrongType)
		if n := s.streamLen(t, s.stream(key)); n != 1 {
			t.Fatalf("refused reap changed the stream (len %d)", n)
		}
	}},
	{"WrongTypeGenerationKeyIsRefused", func(t *testing.T, s *Suite) {
		gk := s.L.GenerationKey(group, key)
		if err := s.faults.PutString(s.Ctx, gk, "not-a-number"); err != nil {
			t.Fatal(err)
		}
		_, ok, err := s.B.AcquirePartitionLease(s.Ctx, s.L.LeaseKey(group, key), gk, owner, long)
		if err == nil || ok {
			t.Fatalf("acquire over a non-numeric generation = %v, %v; want an error", ok, err)
		}
		if s.exists(t, s.L.LeaseKey(group, key)) {
			t.Fatal("a failed acquire set the lease")
		}
	}},
}
