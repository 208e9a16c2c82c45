package redisconn

import (
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/broker"
)

// ErrInvalidURL is wrapped by New, Check and ParseSentinelURL for a Redis
// URL they cannot use: an unknown scheme, a sentinel URL without a master
// name or with an empty address, an option that would send commands to a
// replica. The message says what to change; it never holds the URL's
// password.
var ErrInvalidURL = errors.New("redisconn: invalid Redis URL")

// ErrClusterSentinel is wrapped by New and Check when a Sentinel URL is
// asked for with the cluster layout: Sentinel watches one primary, Redis
// Cluster fails over by itself, and no client speaks both.
var ErrClusterSentinel = errors.New("redisconn: the cluster layout cannot use Sentinel")

// NoPrimaryError is the error of a Sentinel client's command when it
// could not connect to the primary: no Sentinel answered, none knows the
// master name, or the primary they name does not answer. It unwraps to
// broker.ErrUnavailable (the CLI's exit 3) and to go-redis's error.
type NoPrimaryError struct {
	// Master is the master name asked for.
	Master string
	// Unknown is true when the Sentinels that answered do not monitor
	// Master (a misspelt name, or Sentinels of another deployment).
	Unknown bool
	Err     error
}

func (e *NoPrimaryError) Error() string {
	if e.Unknown {
		return fmt.Sprintf("no Sentinel monitors a master named %q: check the master name in the URL (redis+sentinel://HOSTS/MASTER/DB)", e.Master)
	}
	return fmt.Sprintf("cannot reach the primary of Sentinel master %q: %v", e.Master, e.Err)
}

func (e *NoPrimaryError) Unwrap() []error { return []error{broker.ErrUnavailable, e.Err} }

func newNoPrimaryError(master string, err error) error {
	return &NoPrimaryError{Master: master, Unknown: errors.Is(err, redis.Nil), Err: err}
}

// ExecErr returns err, what Exec returned for the pipeline of cmds, when
// none of cmds carries an error of its own, and nil otherwise. go-redis
// sets a transport failure on every command of a pipeline, but an error
// reply to the connection's setup (the server refused the credentials:
// WRONGPASS, NOAUTH) only as Exec's: the commands keep a nil error and
// read as empty replies. A caller that reads each command's error alone
// would take a refused login for "nothing there": a lag of 0, a lane with
// no entry. (redisstore's pipelineErr is the library's copy.)
func ExecErr(cmds []redis.Cmder, err error) error {
	if err == nil {
		return nil
	}
	for _, cmd := range cmds {
		if cmd.Err() != nil {
			return nil
		}
	}
	return err
}
