package redisstore

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
	"github.com/protctl/protctl/pkg/runtime"
)

// Reply prefixes the scripts raise (see lib.lua).
const (
	replyWrongType     = "PROTCTL_WRONGTYPE"
	replyLeaseLost     = "PROTCTL_LEASELOST"
	replyNotParked     = "PROTCTL_NOTPARKED"
	replyUnrecoverable = "PROTCTL_UNRECOVERABLE"
	replyBadRecord     = "PROTCTL_BADRECORD"
)

// call describes the call an error came from, so that mapErr can build
// typed errors. keys are the KEYS a script was given (the scripts name a
// key by its index); key and want describe the key a plain command
// touched, for the server's own WRONGTYPE reply.
type call struct {
	op   string
	keys []string
	key  string
	want string
	// fence is set for fenced calls: PROTCTL_LEASELOST becomes a
	// *broker.LeaseLostError with its details.
	fence *broker.Fence
	// subscription and aggregate name a ledger entry in ErrNotParked and
	// ErrUnrecoverable errors.
	subscription, aggregate string
}

// mapErr turns a go-redis error into the stores' errors:
//
//   - PROTCTL_WRONGTYPE and the server's WRONGTYPE become
//     *broker.WrongTypeError (errors.Is broker.ErrWrongType);
//   - PROTCTL_LEASELOST becomes *broker.LeaseLostError;
//   - PROTCTL_NOTPARKED and PROTCTL_UNRECOVERABLE wrap
//     runtime.ErrNotParked and runtime.ErrUnrecoverable;
//   - transport failures wrap broker.ErrUnavailable and keep the cause.
//
// Only reply prefixes are compared, never whole messages.
func mapErr(c call, err error) error {
	if err == nil {
		return nil
	}
	if isUnavailable(err) {
		return fmt.Errorf("redisstore: %s: %w: %w", c.op, broker.ErrUnavailable, err)
	}
	var rerr redis.Error
	if errors.As(err, &rerr) && !errors.Is(err, redis.Nil) {
		msg := rerr.Error()
		switch {
		case strings.HasPrefix(msg, replyWrongType+" "):
			// PROTCTL_WRONGTYPE <want> <got> <key index> [script: ...]
			f := strings.Fields(msg)
			we := &broker.WrongTypeError{Op: c.op, Key: c.key, Want: c.want}
			if len(f) >= 4 {
				we.Want, we.Got = f[1], f[2]
				we.Key = c.keyAt(f[3])
			}
			return we
		case strings.HasPrefix(msg, "WRONGTYPE"):
			return &broker.WrongTypeError{Op: c.op, Key: c.key, Want: c.want}
		case strings.HasPrefix(msg, replyLeaseLost) && c.fence != nil:
			return &broker.LeaseLostError{Op: c.op, LeaseKey: c.fence.LeaseKey, Token: c.fence.Token}
		case strings.HasPrefix(msg, replyNotParked):
			return c.entryErr(runtime.ErrNotParked)
		case strings.HasPrefix(msg, replyUnrecoverable):
			return c.entryErr(runtime.ErrUnrecoverable)
		case strings.HasPrefix(msg, replyBadRecord+" "):
			f := strings.Fields(msg)
			key := c.key
			if len(f) >= 2 {
				key = c.keyAt(f[1])
			}
			return fmt.Errorf("redisstore: %s: key %q does not hold a JSON parked entry", c.op, key)
		}
	}
	return fmt.Errorf("redisstore: %s: %w", c.op, err)
}

func (c call) keyAt(index string) string {
	if i, err := strconv.Atoi(index); err == nil && i >= 1 && i <= len(c.keys) {
		return c.keys[i-1]
	}
	return c.key
}

func (c call) entryErr(sentinel error) error {
	return fmt.Errorf("redisstore: %s: %q of subscription %q: %w", c.op, c.aggregate, c.subscription, sentinel)
}

// unavailableReplies are server replies that mean "not serving now" rather
// than "your request is wrong": a restarting server loading its dataset,
// a replica without its master, a cluster without quorum.
var unavailableReplies = []string{"LOADING", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN"}

func isUnavailable(err error) bool {
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
