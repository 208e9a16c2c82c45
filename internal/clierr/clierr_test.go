package clierr

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/broker"
)

func TestClassify(t *testing.T) {
	cases := []struct {
		name string
		err  error
		code int
		kind Kind
	}{
		{"nil", nil, 0, ""},
		{"plain error is internal", errors.New("boom"), 1, Internal},
		{"typed", Conflict.Errorf("lease moved"), 5, Conflict},
		{"typed, wrapped again", fmt.Errorf("reap: %w", NotFound.Errorf("no key")), 4, NotFound},
		{"typed wins over the sentinel inside", Refused.Wrap(broker.ErrUnavailable), 6, Refused},
		{"broker unavailable", fmt.Errorf("x: %w", broker.ErrUnavailable), 3, Unavailable},
		{"replicas did not acknowledge", fmt.Errorf("x: %w", &broker.NotReplicatedError{Op: "publish", Want: 1}), 3, Unavailable},
		{"broker invalid argument", &broker.InvalidArgumentError{Op: "trim", Arg: "maxLen", Value: "0", Reason: "must be positive"}, 2, Usage},
		{"broker partitioning unsupported", &broker.UnsupportedError{Op: "reap"}, 2, Usage},
		{"broker lease lost", &broker.LeaseLostError{Op: "ack", LeaseKey: "g:k:__lease__", Token: "n:1"}, 5, Conflict},
		{"broker wrong type", fmt.Errorf("list: %w", &broker.WrongTypeError{Op: "read lane", Key: "c:k", Want: "stream", Got: "string"}), 9, WrongType},
		{"deadline", fmt.Errorf("ping: %w", context.DeadlineExceeded), 3, Unavailable},
		{"connection refused", &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}, 3, Unavailable},
		{"dns", &net.DNSError{Err: "no such host", Name: "redis.invalid"}, 3, Unavailable},
		{"pool timeout", redis.ErrPoolTimeout, 3, Unavailable},
		{"interrupted", fmt.Errorf("drain: %w", ErrInterrupted), 130, Interrupted},
		{"check failed", CheckFailed.Errorf("3 parked > 0"), 8, CheckFailed},
		{"partial", Partial.Errorf("2 of 3 applied"), 7, Partial},
		{"usage", Usage.Errorf("bad flag"), 2, Usage},
		{"a zero-code Error uses its kind", &Error{Kind: Conflict, Err: errors.New("x")}, 5, Conflict},
		{"plain context.Canceled is not an interrupt", context.Canceled, 1, Internal},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, kind := Classify(c.err)
			if code != c.code || kind != c.kind {
				t.Fatalf("Classify(%v) = %d %q, want %d %q", c.err, code, kind, c.code, c.kind)
			}
		})
	}
}

func TestAuthErrorsAreUnavailable(t *testing.T) {
	// A real reply error from go-redis, produced by a server that is not
	// there: proto errors are built by the client from the reply text.
	for _, reply := range []string{"WRONGPASS invalid username-password pair", "NOAUTH Authentication required."} {
		err := replyError(reply)
		if code, _ := Classify(err); code != ExitUnavailable {
			t.Fatalf("%q: exit %d, want 3", reply, code)
		}
	}
	if code, _ := Classify(replyError("ERR unknown command")); code != ExitInternal {
		t.Fatal("other reply errors are internal")
	}
}

type fakeReply string

func (e fakeReply) Error() string { return string(e) }
func (fakeReply) RedisError()     {}

func replyError(s string) error { return fmt.Errorf("cmd: %w", fakeReply(s)) }

func TestWrapNilIsNil(t *testing.T) {
	if Conflict.Wrap(nil) != nil {
		t.Fatal("Wrap(nil) must be a nil error, not a typed nil")
	}
}

func TestErrorMessageAndUnwrap(t *testing.T) {
	inner := errors.New("stream moved")
	err := Conflict.Wrap(inner)
	if err.Error() != "stream moved" || !errors.Is(err, inner) {
		t.Fatalf("Wrap must keep the message and the chain: %v", err)
	}
	if (&Error{Kind: CheckFailed}).Error() != "check failed" {
		t.Fatal("an Error without Err says its kind")
	}
}

func TestKindsCoverTheContract(t *testing.T) {
	want := map[int]Kind{1: Internal, 2: Usage, 3: Unavailable, 4: NotFound, 5: Conflict, 6: Refused, 7: Partial, 8: CheckFailed, 9: WrongType, 130: Interrupted}
	got := map[int]Kind{}
	for _, k := range Kinds() {
		got[k.Code] = k.Kind
		if k.Kind.ExitCode() != k.Code {
			t.Fatalf("%s: ExitCode %d != %d", k.Kind, k.Kind.ExitCode(), k.Code)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("kinds %v, want %v", got, want)
	}
	if Kind("NOPE").ExitCode() != ExitInternal {
		t.Fatal("unknown kinds exit 1")
	}
}
