package redisadapter

import (
	_ "embed"
	"strings"

	"github.com/redis/go-redis/v9"
)

//go:embed prelude.lua
var prelude string

// NewScript composes the prelude and parts, in order, into one script.
// Redis has no shared Lua functions for EVAL scripts, so each script
// carries the prelude; repeating it by hand would let the copies drift
// apart. The text, and so the script's SHA1, depends only on the parts:
// every process of one build sends the same EVALSHA, and a server that
// does not know the script yet gets it once through Script.Run's EVAL
// fallback. Call it once per script, at package initialisation.
func NewScript(parts ...string) *redis.Script {
	return redis.NewScript(prelude + strings.Join(parts, ""))
}
