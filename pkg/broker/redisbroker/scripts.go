package redisbroker

import (
	_ "embed"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/internal/redisadapter"
)

// The scripts are immutable, so they are package-level values shared by
// every Broker. Script.Run sends EVALSHA and falls back to EVAL when the
// server does not know the script yet (after a restart or a SCRIPT FLUSH),
// so loading needs no extra step.
//
// The shared prelude (redisadapter.NewScript) and lib.lua are prepended
// to each script: Redis has no shared Lua functions for EVAL scripts, and
// repeating the type checks by hand would let them drift apart.
// readlib.lua (the lane read and the chunked XACK) is
// prepended too to the scripts that read or acknowledge, so that read.lua
// and ackread.lua read exactly the same way.
var (
	//go:embed lib.lua
	libLua string
	//go:embed leaselib.lua
	leaseLibLua string
	//go:embed acquire.lua
	acquireLua string
	//go:embed acquireat.lua
	acquireAtLua string
	//go:embed acquireread.lua
	acquireReadLua string
	//go:embed renew.lua
	renewLua string
	//go:embed release.lua
	releaseLua string
	//go:embed readlib.lua
	readLibLua string
	//go:embed read.lua
	readLua string
	//go:embed ack.lua
	ackLua string
	//go:embed ackread.lua
	ackReadLua string
	//go:embed reclaim.lua
	reclaimLua string
	//go:embed delconsumer.lua
	delConsumerLua string
	//go:embed deadletter.lua
	deadLetterLua string
	//go:embed trim.lua
	trimLua string
	//go:embed reaplib.lua
	reapLibLua string
	//go:embed reap.lua
	reapLua string
	//go:embed reaplanes.lua
	reapLanesLua string
	//go:embed publish.lua
	publishLua string
	//go:embed append.lua
	appendLua string
	//go:embed record.lua
	recordLua string
	//go:embed dlqreplay.lua
	dlqReplayLua string
	//go:embed dlqdelete.lua
	dlqDeleteLua string
	//go:embed seek.lua
	seekLua string
	//go:embed seekrequest.lua
	seekRequestLua string
	//go:embed seekcancel.lua
	seekCancelLua string
)

var (
	acquireScript     = newScript(leaseLibLua, acquireLua)
	acquireAtScript   = newScript(leaseLibLua, acquireAtLua)
	acquireReadScript = newScript(leaseLibLua, readLibLua, acquireReadLua)
	renewScript       = newScript(renewLua)
	releaseScript     = newScript(releaseLua)
	readScript        = newScript(readLibLua, readLua)
	ackScript         = newScript(readLibLua, ackLua)
	ackReadScript     = newScript(readLibLua, ackReadLua)
	reclaimScript     = newScript(reclaimLua)
	delConsumerScript = newScript(delConsumerLua)
	deadLetterScript  = newScript(deadLetterLua)
	trimScript        = newScript(trimLua)
	reapScript        = newScript(reapLibLua, reapLua)
	reapLanesScript   = newScript(reapLibLua, reapLanesLua)
	publishScript     = newScript(publishLua)
	appendScript      = newScript(appendLua)
	recordScript      = newScript(recordLua)
	dlqReplayScript   = newScript(dlqReplayLua)
	dlqDeleteScript   = newScript(dlqDeleteLua)
	seekScript        = newScript(seekLua)
	seekRequestScript = newScript(seekRequestLua)
	seekCancelScript  = newScript(seekCancelLua)
)

// newScript composes the prelude, lib.lua and parts into one script.
func newScript(parts ...string) *redis.Script {
	return redisadapter.NewScript(append([]string{libLua}, parts...)...)
}
