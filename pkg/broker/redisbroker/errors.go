package redisbroker

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

// Reply prefixes the scripts raise (see lib.lua).
const (
	replyWrongType = "PROTCTL_WRONGTYPE"
	replyLeaseLost = "PROTCTL_LEASELOST"
)

// call describes the call an error came from, so that mapErr can build
// the contract's typed errors. keys are the KEYS a script was given (a
// PROTCTL_WRONGTYPE reply names one by index); key and want describe the
// key a plain command touched, for a server WRONGTYPE reply.
type call struct {
	op   string
	keys []string
	key  string
	want string
	// fence is set for fenced calls: a PROTCTL_LEASELOST reply becomes a
	// *broker.LeaseLostError with these details.
	fence  *broker.Fence
	stream string
}

// mapErr turns a go-redis error into the contract's errors:
//
//   - the scripts' PROTCTL_WRONGTYPE and the server's WRONGTYPE replies
//     become *broker.WrongTypeError;
//   - PROTCTL_LEASELOST becomes *broker.LeaseLostError;
//   - transport failures are wrapped with broker.ErrUnavailable, keeping
//     the cause, so that both errors.Is checks work.
//
// Only reply prefixes are compared, never whole messages.
func mapErr(c call, err error) error {
	if err == nil {
		return nil
	}
	if isUnavailable(err) {
		return fmt.Errorf("redisbroker: %s: %w: %w", c.op, broker.ErrUnavailable, err)
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
				if i, perr := strconv.Atoi(f[3]); perr == nil && i >= 1 && i <= len(c.keys) {
					we.Key = c.keys[i-1]
				}
			}
			return we
		case strings.HasPrefix(msg, "WRONGTYPE"):
			return &broker.WrongTypeError{Op: c.op, Key: c.key, Want: c.want}
		case strings.HasPrefix(msg, replyLeaseLost) && c.fence != nil:
			return &broker.LeaseLostError{Op: c.op, Stream: c.stream, LeaseKey: c.fence.LeaseKey, Token: c.fence.Token}
		}
	}
	return fmt.Errorf("redisbroker: %s: %w", c.op, err)
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
