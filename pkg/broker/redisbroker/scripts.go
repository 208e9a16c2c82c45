package redisbroker

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// The scripts are immutable, so they are package-level values shared by
// every Broker. Script.Run sends EVALSHA and falls back to EVAL when the
// server does not know the script yet (after a restart or a SCRIPT FLUSH),
// so loading needs no extra step.
//
// lib.lua is prepended to each script: Redis has no shared Lua functions
// for EVAL scripts, and repeating the type checks by hand would let them
// drift apart.
var (
	//go:embed lib.lua
	libLua string
	//go:embed acquire.lua
	acquireLua string
	//go:embed renew.lua
	renewLua string
	//go:embed release.lua
	releaseLua string
	//go:embed read.lua
	readLua string
	//go:embed ack.lua
	ackLua string
	//go:embed reclaim.lua
	reclaimLua string
	//go:embed deadletter.lua
	deadLetterLua string
	//go:embed trim.lua
	trimLua string
	//go:embed reap.lua
	reapLua string
	//go:embed publish.lua
	publishLua string
)

var (
	acquireScript    = newScript(acquireLua)
	renewScript      = newScript(renewLua)
	releaseScript    = newScript(releaseLua)
	readScript       = newScript(readLua)
	ackScript        = newScript(ackLua)
	reclaimScript    = newScript(reclaimLua)
	deadLetterScript = newScript(deadLetterLua)
	trimScript       = newScript(trimLua)
	reapScript       = newScript(reapLua)
	publishScript    = newScript(publishLua)
)

func newScript(body string) *redis.Script { return redis.NewScript(libLua + body) }
