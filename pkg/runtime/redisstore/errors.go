package redisstore

import (
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/internal/redisadapter"
	"github.com/protctl/protctl/pkg/runtime/ledger"
)

// Reply prefixes the package's scripts raise besides the prelude's (see
// lib.lua).
const (
	replyNotParked     = "PROTCTL_NOTPARKED"
	replyUnrecoverable = "PROTCTL_UNRECOVERABLE"
	replyBadRecord     = "PROTCTL_BADRECORD"
)

// call describes the call an error came from, for mapErr.
type call = redisadapter.Call

// entryName names the ledger entry a call is about, in the errors that
// wrap ledger.ErrNotParked and ledger.ErrUnrecoverable.
type entryName struct{ subscription, aggregate string }

func (e entryName) err(op string, sentinel error) error {
	return fmt.Errorf("redisstore: %s: %q of subscription %q: %w", op, e.aggregate, e.subscription, sentinel)
}

// mapErr turns a go-redis error into the stores' errors: those of
// redisadapter.Map (PROTCTL_WRONGTYPE and the server's WRONGTYPE,
// PROTCTL_LEASELOST, transport failures), and PROTCTL_BADRECORD names the
// key that does not hold a JSON entry. Only reply prefixes are compared,
// never whole messages.
func mapErr(c call, err error) error { return mapEntryErr(c, entryName{}, err) }

// mapEntryErr is mapErr for a call about the ledger entry e: there
// PROTCTL_NOTPARKED and PROTCTL_UNRECOVERABLE wrap ledger.ErrNotParked
// and ledger.ErrUnrecoverable.
func mapEntryErr(c call, e entryName, err error) error {
	return redisadapter.Map("redisstore", c, err, func(reply string) error {
		switch {
		case strings.HasPrefix(reply, replyNotParked):
			return e.err(c.Op, ledger.ErrNotParked)
		case strings.HasPrefix(reply, replyUnrecoverable):
			return e.err(c.Op, ledger.ErrUnrecoverable)
		case strings.HasPrefix(reply, replyBadRecord+" "):
			key := c.Key
			if f := strings.Fields(reply); len(f) >= 2 {
				key = c.KeyAt(f[1])
			}
			return fmt.Errorf("redisstore: %s: key %q does not hold a JSON parked entry", c.Op, key)
		}
		return nil
	})
}

// pipelineErr returns, mapped, the error of a pipeline that none of its
// commands carries, nil otherwise. go-redis reports a connection it could
// not set up (the server refused the credentials: WRONGPASS, NOAUTH) as
// the pipeline's error only: its commands keep a nil error and read as
// empty replies, so an index would read as missing, and a missing index
// reply as a record key "" that holds no JSON entry. Each command's own
// error (redis.Nil, a reply such as WRONGTYPE, a transport failure, which
// go-redis sets on every command) is left to the code reading it.
func pipelineErr(c call, cmds []redis.Cmder, err error) error {
	if err == nil {
		return nil
	}
	for _, cmd := range cmds {
		if cmd.Err() != nil {
			return nil
		}
	}
	return mapErr(c, err)
}
