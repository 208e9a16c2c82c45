package redisadapter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/broker"
)

// Reply prefixes the prelude raises (see prelude.lua).
const (
	ReplyWrongType = "PROTCTL_WRONGTYPE"
	ReplyLeaseLost = "PROTCTL_LEASELOST"
)

// Call describes the call an error came from, so that Map can build the
// contract's typed errors.
type Call struct {
	Op string
	// Keys are the KEYS a script was given: the prelude's replies name a
	// key by its index.
	Keys []string
	// Key and Want describe the key a plain command touched, for the
	// server's own WRONGTYPE reply.
	Key, Want string
	// Fence is set for fenced calls: PROTCTL_LEASELOST becomes a
	// *broker.LeaseLostError with its details, and Stream's.
	Fence  *broker.Fence
	Stream string
}

// KeyAt is the key a reply names by its index in Keys ("1" is the
// first), or Key when index names none.
func (c Call) KeyAt(index string) string {
	if i, err := strconv.Atoi(index); err == nil && i >= 1 && i <= len(c.Keys) {
		return c.Keys[i-1]
	}
	return c.Key
}

// Map turns a go-redis error of c into the contract's errors, each
// prefixed "pkg: op: ":
//
//   - transport failures and the replies of a server not serving now
//     (Unavailable) wrap broker.ErrUnavailable and keep the cause, so that
//     both errors.Is checks work;
//   - PROTCTL_WRONGTYPE and the server's WRONGTYPE become
//     *broker.WrongTypeError (errors.Is broker.ErrWrongType);
//   - PROTCTL_LEASELOST of a fenced call becomes *broker.LeaseLostError;
//   - another error reply is handed to more (a package's own codes), when
//     given: its non-nil answer is returned;
//   - anything else is wrapped as it is.
//
// Only reply prefixes are compared, never whole messages. A nil err is
// nil.
func Map(pkg string, c Call, err error, more func(reply string) error) error {
	if err == nil {
		return nil
	}
	if Unavailable(err) {
		return fmt.Errorf("%s: %s: %w: %w", pkg, c.Op, broker.ErrUnavailable, err)
	}
	var rerr redis.Error
	if errors.As(err, &rerr) && !errors.Is(err, redis.Nil) {
		msg := rerr.Error()
		switch {
		case strings.HasPrefix(msg, ReplyWrongType+" "):
			// PROTCTL_WRONGTYPE <want> <got> <key index> [script: ...]
			f := strings.Fields(msg)
			we := &broker.WrongTypeError{Op: c.Op, Key: c.Key, Want: c.Want}
			if len(f) >= 4 {
				we.Want, we.Got = f[1], f[2]
				we.Key = c.KeyAt(f[3])
			}
			return we
		case strings.HasPrefix(msg, "WRONGTYPE"):
			return &broker.WrongTypeError{Op: c.Op, Key: c.Key, Want: c.Want}
		case strings.HasPrefix(msg, ReplyLeaseLost) && c.Fence != nil:
			return &broker.LeaseLostError{Op: c.Op, Stream: c.Stream, LeaseKey: c.Fence.LeaseKey, Token: c.Fence.Token}
		}
		if more != nil {
			if mapped := more(msg); mapped != nil {
				return mapped
			}
		}
	}
	return fmt.Errorf("%s: %s: %w", pkg, c.Op, err)
}

// unavailableReplies are server replies that mean "not serving now" rather
// than "your request is wrong": a restarting server loading its dataset,
// a replica without its master, a cluster without quorum.
var unavailableReplies = []string{"LOADING", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN"}

// Unavailable reports whether err means the server could not be reached
// or is not serving now (worth a retry later), rather than that the
// request was wrong.
func Unavailable(err error) bool {
	var ne net.Error
	switch {
	case errors.As(err, &ne),
		errors.Is(err, io.EOF),
		errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE),
		errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, redis.ErrClosed),
		errors.Is(err, redis.ErrPoolTimeout):
		return true
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		msg := rerr.Error()
		for _, p := range unavailableReplies {
			if strings.HasPrefix(msg, p) {
				return true
			}
		}
	}
	return false
}
