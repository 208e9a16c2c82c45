package brokertest

import (
	"slices"
	"testing"

	"github.com/protctl/protctl/pkg/broker"
)

var indexCases = []Case{
	{"RecordPartitionIsIdempotent", func(t *testing.T, s *Suite) {
		for i := 0; i < 3; i++ {
			for _, k := range []string{"a", "b"} {
				if err := s.B.RecordPartition(s.Ctx, cat, k); err != nil {
					t.Fatal(err)
				}
			}
		}
		if got := s.keys(t); !slices.Equal(got, []string{"a", "b"}) {
			t.Fatalf("keys = %v, want [a b]", got)
		}
	}},
	{"UnknownCategoryHasNoKeys", func(t *testing.T, s *Suite) {
		ks, err := s.B.PartitionKeys(s.Ctx, "no::such")
		if err != nil || len(ks) != 0 {
			t.Fatalf("keys of an unknown category = %v, %v; want none, nil", ks, err)
		}
	}},
	{"ScanPartitionKeysPagesEveryKey", func(t *testing.T, s *Suite) {
		want := make([]string, 0, 250)
		for i := 0; i < 250; i++ {
			k := "k" + itoa(i)
			want = append(want, k)
			if err := s.B.RecordPartition(s.Ctx, cat, k); err != nil {
				t.Fatal(err)
			}
		}
		seen := map[string]bool{}
		var cursor uint64
		for pages := 0; ; pages++ {
			if pages > 1000 {
				t.Fatal("scan does not terminate")
			}
			ks, next, err := s.B.ScanPartitionKeys(s.Ctx, cat, cursor, 10)
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range ks {
				seen[k] = true
			}
			if cursor = next; cursor == 0 {
				break
			}
		}
		for _, k := range want {
			if !seen[k] {
				t.Fatalf("scan missed %s (saw %d keys)", k, len(seen))
			}
		}
		if len(seen) != len(want) {
			t.Fatalf("scan saw %d distinct keys, want %d", len(seen), len(want))
		}
	}},
	{"PublishAppendsAndRecordsIndex", func(t *testing.T, s *Suite) {
		ids := s.publish(t, key, "", 3)
		if got := s.keys(t); !slices.Equal(got, []string{key}) {
			t.Fatalf("index = %v, want [%s]", got, key)
		}
		if got := s.streamIDs(t, s.stream(key)); !slices.Equal(got, ids) {
			t.Fatalf("stream ids = %v, want %v", got, ids)
		}
	}},
	{"PublishToBackfillLane", func(t *testing.T, s *Suite) {
		s.publish(t, key, broker.DefaultBackfillSuffix, 2)
		if n := s.streamLen(t, s.backfill(key)); n != 2 {
			t.Fatalf("backfill lane length = %d, want 2", n)
		}
		if n := s.streamLen(t, s.stream(key)); n != 0 {
			t.Fatalf("main lane length = %d, want 0", n)
		}
		if got := s.keys(t); !slices.Equal(got, []string{key}) {
			t.Fatalf("index = %v, want [%s]", got, key)
		}
	}},
	{"RegisterGroupIsIdempotent", func(t *testing.T, s *Suite) {
		for i := 0; i < 2; i++ {
			for _, g := range []string{"g1", "g2"} {
				if err := s.B.RegisterGroup(s.Ctx, cat, g); err != nil {
					t.Fatal(err)
				}
			}
		}
		gs, err := s.B.RegisteredGroups(s.Ctx, cat)
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(gs)
		if !slices.Equal(gs, []string{"g1", "g2"}) {
			t.Fatalf("registered groups = %v, want [g1 g2]", gs)
		}
	}},
	{"AppendWritesPlainStream", func(t *testing.T, s *Suite) {
		id, err := s.B.Append(s.Ctx, cat, payload(key, 0))
		if err != nil {
			t.Fatal(err)
		}
		if got := s.streamIDs(t, cat); !slices.Equal(got, []string{id}) {
			t.Fatalf("category stream ids = %v, want [%s]", got, id)
		}
		if got := s.keys(t); len(got) != 0 {
			t.Fatalf("a plain append recorded partitions %v", got)
		}
	}},
}
