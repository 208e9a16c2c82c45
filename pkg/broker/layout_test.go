package broker

import "testing"

// ReservedKey and ValidateKey agree on the names a category keeps for
// itself, with the default backfill suffix and a configured one.
func TestReservedKey(t *testing.T) {
	cases := []struct {
		key, backfill string
		reserved      bool
	}{
		{"dlq", "", true},
		{"backfill", "", true},
		{"backfill", "bf", false},
		{"bf", "bf", true},
		{"__partitions__", "", true},
		{"__x", "", false},
		{"o-1", "", false},
		{"dlq-1", "", false},
	}
	for _, c := range cases {
		if got := ReservedKey(c.key, c.backfill); got != c.reserved {
			t.Errorf("ReservedKey(%q, %q) = %v, want %v", c.key, c.backfill, got, c.reserved)
		}
		if err := ProteanLayout.ValidateKey(c.key, c.backfill); (err != nil) != c.reserved {
			t.Errorf("ValidateKey(%q, %q) = %v, want an error: %v", c.key, c.backfill, err, c.reserved)
		}
	}
}
