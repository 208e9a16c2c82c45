package redisbroker

import (
	"errors"
	"fmt"
	"testing"
)

// Malformed or unexpected raw replies fail with an error, never a panic
// or a wrong message; error replies come back as replyError.
func TestParseRawReadGroupRejectsBadReplies(t *testing.T) {
	for _, tc := range []struct {
		name, raw string
		want      int // messages, or -1 for an error
	}{
		{"nil RESP2", "*-1\r\n", 0},
		{"nil RESP3", "_\r\n", 0},
		{"empty entries", "*1\r\n*2\r\n$1\r\ns\r\n*0\r\n", 0},
		{"one entry RESP2", "*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n1-1\r\n*2\r\n$4\r\ndata\r\n$2\r\nhi\r\n", 1},
		{"one entry RESP3", "%1\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n1-1\r\n*2\r\n$4\r\ndata\r\n$2\r\nhi\r\n", 1},
		{"deleted body", "*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n1-1\r\n*-1\r\n", 1},
		{"error reply", "-NOGROUP No such key\r\n", -1},
		{"short string", "*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n1-1\r\n*2\r\n$4\r\ndata\r\n$20\r\nhi\r\n", -1},
		{"bad length", "*1\r\n*2\r\n$x\r\ns\r\n", -1},
		{"no CRLF", "*1", -1},
		{"two streams", "*2\r\n", -1},
		{"odd fields", "*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n1-1\r\n*1\r\n$4\r\ndata\r\n", -1},
		{"truncated", "*1\r\n*2\r\n$1\r\ns\r\n*3\r\n", -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msgs, err := parseRawReadGroup("s", []byte(tc.raw))
			if tc.want < 0 {
				if err == nil {
					t.Fatalf("no error, messages %+v", msgs)
				}
				return
			}
			if err != nil || len(msgs) != tc.want {
				t.Fatalf("= %+v, %v; want %d messages", msgs, err, tc.want)
			}
			if tc.want == 1 && msgs[0].ID != "1-1" {
				t.Fatalf("id %q", msgs[0].ID)
			}
		})
	}
	_, err := parseRawReadGroup("s", []byte("-NOGROUP x\r\n"))
	var re replyError
	if !errors.As(err, &re) {
		t.Fatalf("error reply = %T %v, want a replyError", err, err)
	}
}

func BenchmarkParseRawReadGroup(b *testing.B) {
	body := `{"data":{"n":1},"metadata":{"headers":{"id":"x","type":"Bench"}}}`
	raw := []byte("*1\r\n*2\r\n$1\r\ns\r\n*100\r\n")
	for i := 0; i < 100; i++ {
		raw = fmt.Appendf(raw, "*2\r\n$15\r\n1700000000000-1\r\n*2\r\n$4\r\ndata\r\n$%d\r\n%s\r\n", len(body), body)
	}
	b.ReportAllocs()
	for b.Loop() {
		msgs, err := parseRawReadGroup("s", raw)
		if err != nil || len(msgs) != 100 {
			b.Fatal(len(msgs), err)
		}
	}
}
