package redisbroker

import (
	"fmt"
	"testing"
)

// BenchmarkParseEntries decodes a batch of 100 entries as read_lane
// returns them: the client-side cost of a fenced read beyond go-redis's
// own reply parsing.
func BenchmarkParseEntries(b *testing.B) {
	res := make([]any, 0, 200)
	for i := 0; i < 100; i++ {
		res = append(res, fmt.Sprintf("1700000000000-%d", i), `{"data":{"n":1},"metadata":{"headers":{"id":"x","type":"Bench"}}}`)
	}
	b.ReportAllocs()
	for b.Loop() {
		msgs, err := parseEntries("bench::order:k1", res)
		if err != nil || len(msgs) != 100 {
			b.Fatal(len(msgs), err)
		}
	}
}
