package broker

import (
	"encoding/json"
	"strings"
	"testing"
)

// The parsers below read what other tools wrote into Redis or what an
// operator typed: none may panic, and what they accept must round-trip.
// Their seed corpora are in testdata/fuzz/<target>, replayed by every go
// test; scripts/fuzz runs each target for a bounded time in CI.

func FuzzValidateKey(f *testing.F) {
	f.Fuzz(func(t *testing.T, key string) {
		for _, l := range []Layout{ProteanLayout, ClusterLayout} {
			err := l.ValidateKey(key, DefaultBackfillSuffix)
			if err == nil {
				if key == "" || len(key) > MaxKeyLen || strings.Contains(key, ":") {
					t.Fatalf("%s layout accepted %q", l, key)
				}
				if l.IsCluster() && strings.ContainsAny(key, "{}") {
					t.Fatalf("cluster layout accepted %q", key)
				}
			}
		}
	})
}

func FuzzParseStreamID(f *testing.F) {
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseStreamID(s)
		if err != nil {
			return
		}
		again, err := ParseStreamID(id.String())
		if err != nil || again != id {
			t.Fatalf("%q parsed to %v, which does not round-trip (%v, %v)", s, id, again, err)
		}
		if id.Compare(id) != 0 || id.Less(id) {
			t.Fatalf("%v does not compare equal to itself", id)
		}
	})
}

func FuzzParseFenceToken(f *testing.F) {
	f.Fuzz(func(t *testing.T, s string) {
		owner, gen, err := ParseFenceToken(s)
		if err != nil {
			return
		}
		if gen <= 0 || owner == "" || FenceToken(owner, gen) != s && !strings.Contains(s, ":+") && !strings.Contains(s, ":0") {
			// Leading '+' or zeros parse but format differently; anything else must round-trip.
			t.Fatalf("%q parsed to (%q, %d), formats as %q", s, owner, gen, FenceToken(owner, gen))
		}
	})
}

func FuzzDecodeEnvelope(f *testing.F) {
	f.Fuzz(func(t *testing.T, raw []byte) {
		env, err := DecodeEnvelope(raw)
		if err != nil {
			return
		}
		out, err := json.Marshal(env)
		if err != nil {
			t.Fatalf("a decoded envelope does not encode: %v", err)
		}
		if _, err := DecodeEnvelope(out); err != nil {
			t.Fatalf("re-decoding %s: %v", out, err)
		}
	})
}
