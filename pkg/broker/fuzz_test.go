package broker

import (
	"encoding/json"
	"strings"
	"testing"
)

// The parsers below read what other tools wrote into Redis or what an
// operator typed: none may panic, and what they accept must round-trip.

func FuzzValidateKey(f *testing.F) {
	for _, s := range []string{"o-1", "", "a:b", "dlq", "backfill", "__x__", "{k}", strings.Repeat("k", 256), "é", "\x00"} {
		f.Add(s)
	}
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
	for _, s := range []string{"0-0", "1-1", "1700000000000-5", "18446744073709551615-18446744073709551615", "5", "-", "1-", "a-b", "1-2-3", ""} {
		f.Add(s)
	}
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
	for _, s := range []string{"node-a:1", "a:b:7", ":1", "node:", "node:0", "node:-1", "node:x", ""} {
		f.Add(s)
	}
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
	for _, s := range []string{
		`{"data":{"a":1},"metadata":{"headers":{"id":"x","type":"T","time":"t","stream":"s","extra":[1]},"domain":{"v":1}}}`,
		`{"metadata":{"headers":{"id":5}}}`,
		`{"data":null}`, `[]`, `"x"`, `{`, ``, `{"data":1,"metadata":{"headers":null}}`,
	} {
		f.Add([]byte(s))
	}
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
