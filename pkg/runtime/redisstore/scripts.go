package redisstore

import (
	_ "embed"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/internal/redisadapter"
)

// The scripts are immutable, so they are package-level values shared by
// every Store. Script.Run sends EVALSHA and falls back to EVAL when the
// server does not know the script yet (after a restart or SCRIPT FLUSH).
// The shared prelude (redisadapter.NewScript) and lib.lua are prepended
// to each: EVAL scripts cannot share Lua functions.
var (
	//go:embed lib.lua
	libLua string
	//go:embed heartbeat.lua
	heartbeatLua string
	//go:embed members.lua
	membersLua string
	//go:embed leave.lua
	leaveLua string
	//go:embed checkpoint.lua
	checkpointLua string
	//go:embed park.lua
	parkLua string
	//go:embed setstatus.lua
	setStatusLua string
	//go:embed resolve.lua
	resolveLua string
	//go:embed request.lua
	requestLua string
	//go:embed requestpinned.lua
	requestPinnedLua string
	//go:embed requesttoken.lua
	requestTokenLua string
	//go:embed unindex.lua
	unindexLua string
	//go:embed index.lua
	indexLua string
	//go:embed seekset.lua
	seekSetLua string
	//go:embed seekrequest.lua
	seekRequestLua string
	//go:embed seekcomplete.lua
	seekCompleteLua string
	//go:embed seekwithdraw.lua
	seekWithdrawLua string
	//go:embed placementcas.lua
	placementCASLua string
)

var (
	heartbeatScript  = newScript(heartbeatLua)
	membersScript    = newScript(membersLua)
	leaveScript      = newScript(leaveLua)
	checkpointScript = newScript(checkpointLua)
	parkScript       = newScript(parkLua)
	setStatusScript  = newScript(setStatusLua)
	resolveScript    = newScript(resolveLua)
	requestScript    = newScript(requestLua)
	requestPinned    = newScript(requestPinnedLua)
	requestToken     = newScript(requestTokenLua)
	unindexScript    = newScript(unindexLua)
	indexScript      = newScript(indexLua)

	seekSetScript      = newScript(seekSetLua)
	seekRequestScript  = newScript(seekRequestLua)
	seekCompleteScript = newScript(seekCompleteLua)
	seekWithdrawScript = newScript(seekWithdrawLua)
	placementCAS       = newScript(placementCASLua)
)

// newScript composes the prelude, lib.lua and body into one script.
func newScript(body string) *redis.Script { return redisadapter.NewScript(libLua, body) }
