// Package clierr gives protctl's errors the exit code and machine-readable
// kind that the CLI contract promises (docs/cli.md, "Exit codes").
//
// A command returns an ordinary error; when the error means something more
// specific than "internal error" it wraps it in a *Error of the right Kind:
//
//	return clierr.NotFound.Errorf("category %q has no partition %q", c, k)
//	return clierr.Conflict.Wrap(err)
//
// Errors from lower layers need no wrapping when they carry a sentinel this
// package knows (broker.ErrUnavailable, broker.ErrInvalidArgument, network
// and deadline errors, ...): Classify maps them. cmd/protctl calls Classify
// once, on the error the command tree returned, and exits with its code.
package clierr

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/broker"
)

// Kind is the stable, machine-readable name of a class of failure, printed
// as error.code in -o json mode. Kinds and their exit codes are API.
type Kind string

// The kinds, one per exit code of the contract.
const (
	Internal    Kind = "INTERNAL"     // exit 1
	Usage       Kind = "USAGE"        // exit 2: bad flag, argument or config
	Unavailable Kind = "UNAVAILABLE"  // exit 3: backend unreachable, auth failed, timeout
	NotFound    Kind = "NOT_FOUND"    // exit 4
	Conflict    Kind = "CONFLICT"     // exit 5: state changed since the plan
	Refused     Kind = "REFUSED"      // exit 6: a guard said no
	Partial     Kind = "PARTIAL"      // exit 7: some items applied, some not
	CheckFailed Kind = "CHECK_FAILED" // exit 8
	WrongType   Kind = "WRONG_TYPE"   // exit 9: a key holds another Redis type than protctl reads there
	Interrupted Kind = "INTERRUPTED"  // exit 130
)

// Exit codes of the contract.
const (
	ExitOK          = 0
	ExitInternal    = 1
	ExitUsage       = 2
	ExitUnavailable = 3
	ExitNotFound    = 4
	ExitConflict    = 5
	ExitRefused     = 6
	ExitPartial     = 7
	ExitCheckFailed = 8
	ExitWrongType   = 9
	ExitInterrupted = 130
)

// KindInfo describes one kind for the reference documentation.
type KindInfo struct {
	Kind    Kind
	Code    int
	Meaning string
}

var kinds = []KindInfo{
	{Internal, ExitInternal, "internal error"},
	{Usage, ExitUsage, "usage, flag or config error (including `tui` without a TTY)"},
	{Unavailable, ExitUnavailable, "backend unreachable, auth failed, timeout"},
	{NotFound, ExitNotFound, "not found (category, stream, partition key, group, subscription, service, node, aggregate), in an argument or a list filter"},
	{Conflict, ExitConflict, "conflict: state changed since the plan; that item was not applied"},
	{Refused, ExitRefused, "refused by a guard: read-only, live owner without `--force`, unsafe, no `--yes` without a TTY, declined"},
	{Partial, ExitPartial, "partial: some items applied (by this apply, or `done` by an earlier apply of the same plan), some not (per-item results in the output)"},
	{CheckFailed, ExitCheckFailed, "`check` failed"},
	{WrongType, ExitWrongType, "a key holds the wrong Redis type (a string where a stream belongs, ...): the message names the key, its type and the type expected; nothing was changed"},
	{Interrupted, ExitInterrupted, "interrupted (SIGINT or SIGTERM)"},
}

// Kinds lists every kind with its exit code, in exit-code order. The
// reference documentation is generated from it.
func Kinds() []KindInfo { return append([]KindInfo(nil), kinds...) }

// ExitCode is the process exit code of the kind; unknown kinds exit 1.
func (k Kind) ExitCode() int {
	for _, i := range kinds {
		if i.Kind == k {
			return i.Code
		}
	}
	return ExitInternal
}

// Errorf returns a *Error of kind k whose message is fmt.Sprintf(format,
// a...); %w wraps as with fmt.Errorf.
func (k Kind) Errorf(format string, a ...any) error {
	return &Error{Kind: k, Code: k.ExitCode(), Err: fmt.Errorf(format, a...)}
}

// Wrap returns err as a *Error of kind k, or nil when err is nil. The
// message is err's own.
func (k Kind) Wrap(err error) error {
	if err == nil {
		return nil
	}
	return &Error{Kind: k, Code: k.ExitCode(), Err: err}
}

// Error is an error with the exit code and kind the contract assigns it.
// Wrapping one inside another error (fmt.Errorf("...: %w", e)) keeps its
// code: Classify finds it with errors.As.
type Error struct {
	Code int  // process exit code
	Kind Kind // machine-readable class, error.code in JSON
	Err  error
}

func (e *Error) Error() string {
	if e.Err == nil {
		return strings.ToLower(strings.ReplaceAll(string(e.Kind), "_", " "))
	}
	return e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// ErrInterrupted is the cancellation cause of the command context when the
// process received SIGINT or SIGTERM. A command that stops because of it
// returns it (or context.Canceled with it as the context's cause) and the
// process exits 130.
var ErrInterrupted = errors.New("interrupted")

// Classify says which exit code and kind err stands for. It is the one
// place where errors become exit codes:
//
//   - nil: 0, "";
//   - a *Error anywhere in the chain: its Code and Kind;
//   - ErrInterrupted: 130;
//   - broker.ErrUnavailable, context.DeadlineExceeded, network errors,
//     Redis auth errors and pool timeouts: 3; so is
//     broker.ErrNotReplicated (the replicas did not acknowledge a write in
//     time: a replica is down or lagging);
//   - broker.ErrInvalidArgument, broker.ErrPartitioningUnsupported: 2;
//   - broker.ErrLeaseLost: 5 (the lease moved under an operator action);
//   - broker.ErrWrongType (a *broker.WrongTypeError): 9, a data problem
//     wherever it is found (a listing, a plan, a publish);
//   - anything else: 1.
//
// The first *Error wins, so a command can override what a sentinel deeper
// in the chain would mean.
func Classify(err error) (code int, kind Kind) {
	var e *Error
	switch {
	case err == nil:
		return ExitOK, ""
	case errors.As(err, &e):
		if e.Code == 0 {
			return e.Kind.ExitCode(), e.Kind
		}
		return e.Code, e.Kind
	case errors.Is(err, ErrInterrupted):
		return ExitInterrupted, Interrupted
	case isUnavailable(err):
		return ExitUnavailable, Unavailable
	case errors.Is(err, broker.ErrInvalidArgument), errors.Is(err, broker.ErrPartitioningUnsupported):
		return ExitUsage, Usage
	case errors.Is(err, broker.ErrLeaseLost):
		return ExitConflict, Conflict
	case errors.Is(err, broker.ErrWrongType):
		return ExitWrongType, WrongType
	default:
		return ExitInternal, Internal
	}
}

func isUnavailable(err error) bool {
	if errors.Is(err, broker.ErrUnavailable) ||
		errors.Is(err, broker.ErrNotReplicated) ||
		errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, os.ErrDeadlineExceeded) ||
		errors.Is(err, redis.ErrPoolTimeout) ||
		errors.Is(err, redis.ErrClosed) {
		return true
	}
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		return true
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) {
		return true
	}
	// A TLS handshake that failed on our side: the server's certificate
	// does not verify (unknown CA, wrong name, expired), or the server
	// does not speak TLS. Remote alerts arrive as *net.OpError above.
	var certErr *tls.CertificateVerificationError
	var recErr tls.RecordHeaderError
	if errors.As(err, &certErr) || errors.As(err, &recErr) {
		return true
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return true
	}
	if IsPermissionDenied(err) {
		return true
	}
	// Authentication failures are reply errors; their prefixes are the only
	// error text we look at (the Redis protocol's error codes).
	var rerr redis.Error
	if errors.As(err, &rerr) {
		msg := rerr.Error()
		for _, p := range []string{"WRONGPASS", "NOAUTH", "NOPERM", "ERR AUTH", "ERR invalid password", "ERR Client sent AUTH"} {
			if strings.HasPrefix(msg, p) {
				return true
			}
		}
	}
	return false
}

// IsPermissionDenied reports whether err is a Redis ACL denial: a NOPERM
// reply (a command, key or channel the user may not use), or the error a
// script gets when it calls a command or touches a key its user may not.
// Classify counts it as "auth failed" (exit 3); docs/security.md lists
// the rules each role needs.
func IsPermissionDenied(err error) bool {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	msg := rerr.Error()
	return strings.HasPrefix(msg, "NOPERM") ||
		strings.HasPrefix(msg, "ERR The user executing the script can't")
}
