// Package acl derives the least-privilege Redis ACL rules of protctl's
// three roles from the key layout and the commands the code sends:
//
//   - readonly: every ls, show, check, fsck, plan (--dry-run), topics,
//     nodes and audit ls, and the dashboard in read-only mode;
//   - operator: everything readonly does, plus every repair (reap,
//     release, skip-head, streams trim, parked retry and skip, dlq replay
//     and purge, apply -f),
//     protctl publish and the audit entry each applied repair appends;
//   - node: protctl run node (and an embedded runtime): partitioned
//     subscriptions, the publisher, Kafka topic leases and checkpoints,
//     status records, the failure ledger.
//
// A Profile lists the role's commands (explicit "+cmd" and "+cmd|sub"
// rules, never a category), key patterns ("~p", and for readonly the
// read-only selector "%R~p" of Redis 7) and Pub/Sub channels ("&p"), and
// renders them as an ACL SETUSER command and as an ACL file line.
// docs/security.md shows the profiles; docs/decisions/0020-acl-profiles.md
// explains the choices.
//
// Without categories and groups the key patterns cover every name the
// layout can produce. Naming the categories and groups of a deployment
// narrows them to those.
package acl

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/protctl/protctl/pkg/broker"
)

// Role is one of the three profiles.
type Role string

// The roles.
const (
	ReadOnly Role = "readonly"
	Operator Role = "operator"
	Node     Role = "node"
)

// Roles lists the roles in the order the documentation shows them.
func Roles() []Role { return []Role{ReadOnly, Operator, Node} }

// ErrUnknownRole is returned by ParseRole and For for a role that is not
// one of Roles.
var ErrUnknownRole = errors.New("acl: unknown role")

// ParseRole turns "readonly", "operator" or "node" into a Role.
func ParseRole(s string) (Role, error) {
	for _, r := range Roles() {
		if string(r) == s {
			return r, nil
		}
	}
	return "", fmt.Errorf("%w %q: want %s", ErrUnknownRole, s, roleList())
}

func roleList() string {
	names := make([]string, 0, 3)
	for _, r := range Roles() {
		names = append(names, string(r))
	}
	return strings.Join(names, ", ")
}

// DefaultUser is the ACL user name of role when Options.User is empty:
// "protctl-" + role.
func DefaultUser(r Role) string { return "protctl-" + string(r) }

// Options narrow a profile. The zero value is the default user of the
// role, the Protean layout and patterns matching every category and group.
type Options struct {
	// User is the ACL user name. Default DefaultUser(role).
	User string
	// Layout is the key layout. Default (zero) the Protean layout.
	Layout broker.Layout
	// Categories, when set, limit the partition keys (index, group
	// registry, lanes, dead letters) and wake-up channels to these
	// categories. Default: every category.
	Categories []string
	// Groups, when set, limit the lease and generation keys (and the
	// parked records beside them) to these groups (subscription names).
	// Default: every group.
	Groups []string
}

// Profile is a role's rules. Its JSON field names are API (protctl acl
// print -o json).
type Profile struct {
	Role   Role   `json:"role"`
	User   string `json:"user"`
	Layout string `json:"layout"`
	// Commands are the command rules: "+get", "+xinfo|groups".
	Commands []string `json:"commands"`
	// Keys are the key pattern rules: "~p" (read and write) or "%R~p"
	// (read only).
	Keys []string `json:"keys"`
	// Channels are the Pub/Sub channel rules: "&p". Empty: none.
	Channels []string `json:"channels"`
	// SetUser is the ACL SETUSER command that creates or resets the user
	// with exactly these rules (no password: append >PASSWORD or #SHA256).
	SetUser string `json:"setUser"`
	// ACLFileLine is the same user as a line of an ACL file (aclfile).
	ACLFileLine string `json:"aclFileLine"`
}

// Rules returns the profile's rules after "reset on", in order: commands,
// keys, channels.
func (p Profile) Rules() []string {
	out := make([]string, 0, len(p.Commands)+len(p.Keys)+len(p.Channels))
	out = append(out, p.Commands...)
	out = append(out, p.Keys...)
	return append(out, p.Channels...)
}

// AuditStream is the stream every applied repair appends to and
// protctl audit ls reads (operator: XADD; readonly: XRANGE, XREVRANGE).
const AuditStream = "protctl:audit"

// Command rules. Each list names the code that sends the commands; a test
// (acl_test.go) checks that every command of the Lua scripts the role
// runs is granted.
var (
	// connection: go-redis sends HELLO (always allowed) and then CLIENT
	// SETNAME "protctl" on every new connection, SELECT when the URL
	// names a database other than 0; PING checks a connection.
	connectionCommands = []string{"+ping", "+client|setname", "+select"}

	// clusterCommands: go-redis's ClusterClient reads the slot map
	// (CLUSTER SLOTS), the command table (COMMAND, to find keys) and
	// follows ASK redirections (ASKING).
	clusterCommands = []string{"+cluster|slots", "+command", "+asking"}

	// readCommands: internal/inspect (partitions, leases, explain, fsck,
	// trim plans, topics), redisstore's ledger and membership readers,
	// the audit log reader, completion. Scripts: members.lua (nodes ls),
	// which only reads (ZRANGEBYSCORE, TIME, TYPE).
	readCommands = []string{
		"+time", "+type", "+exists", "+scan",
		"+get", "+mget", "+pttl",
		"+smembers", "+sismember", "+smismember", "+scard", "+sscan", "+srandmember",
		"+hget", "+hgetall", "+hscan",
		"+zrangebyscore",
		"+xlen", "+xrange", "+xrevrange", "+xpending", "+xinfo|groups", "+xinfo|stream", "+xinfo|consumers",
		"+evalsha", "+eval",
	}

	// operatorCommands: internal/repair's applies, in Lua: reap.lua and
	// reaplanes.lua (DEL, SREM; the cluster layout's reap removes and
	// re-adds the index entry: SREM, SADD), release.lua (DEL),
	// deadletter.lua (XADD, XACK: skip-head) under an operator lease
	// taken by acquireat.lua when no node holds the partition (INCR of
	// the generation, SET PX), trim.lua (XTRIM),
	// request.lua and requestpinned.lua (SET, SET PX), requesttoken.lua
	// (HSET, PEXPIRE) and the request's PUBLISH (parked retry/skip);
	// publish.lua, append.lua, record.lua (XADD, SADD, PUBLISH: protctl
	// publish); delconsumer.lua (XINFO CONSUMERS, XGROUP DELCONSUMER:
	// partitions prune-consumers); dlqreplay.lua (XADD, XDEL, HSET and
	// PEXPIRE of the replayed marker, SADD, PUBLISH: dlq replay) and
	// dlqdelete.lua (XDEL: dlq purge); seek.lua (XGROUP SETID, XACK, and
	// HEXISTS of a request), seekrequest.lua and seekcancel.lua (HSET,
	// DEL, PEXPIRE), the requests set (SADD, SREM) and PUBLISH (partitions
	// seek); placementcas.lua (HGET, HSET, HDEL, PUBLISH: nodes
	// cordon/drain/uncordon, partitions move); the audit entry (XADD ...
	// MAXLEN); WAIT after a publish with --wait-replicas.
	operatorCommands = []string{
		"+del", "+srem", "+sadd", "+set", "+incr", "+hset", "+hdel", "+hexists", "+pexpire",
		"+xadd", "+xack", "+xdel", "+xtrim", "+xgroup|delconsumer", "+xgroup|setid",
		"+publish", "+wait",
	}

	// nodeCommands: the runtime's partitioned subscription (acquire,
	// renew, release, read, ackread, ack, reclaim, deadletter, reap, trim
	// scripts; the waiter's XREAD BLOCK and its nudge stream; the wake-up
	// subscription), the publisher, the lease, checkpoint, membership
	// and ledger stores (redisstore's scripts, the parked index and the
	// requests subscription). renewmany loads its script (SCRIPT LOAD)
	// before a pipelined EVALSHA. The fenced reads run as optimistic
	// transactions (redisbroker's fencedtx.go: WATCH lease, GET, MULTI,
	// XACK or XGROUP CREATE, XREADGROUP, EXEC; UNWATCH when the lease is
	// not the token). reclaim.lua and release.lua delete the group's
	// empty consumers (XINFO CONSUMERS, XGROUP DELCONSUMER). WAIT follows
	// lease writes with lease.waitReplicas (and publishes with
	// redisbroker.WithPublishReplicas). seek.lua carries out operators'
	// seek requests (HEXISTS, HSET, XGROUP SETID), followed through
	// SMEMBERS and a subscription. CLIENT ID and CLIENT TRACKING turn on
	// the broadcast tracking of a category's prefix that announces new
	// keys of any publisher (redisbroker.WatchAppends, decision 0031): a
	// connection-scoped setting that reads nothing. GETRANGE reads the
	// tag a held record begins with before a heartbeat extends it
	// (redisstore's heartbeat.lua, decision 0051).
	nodeCommands = []string{
		"+time", "+type", "+exists",
		"+get", "+getrange", "+mget", "+set", "+del", "+incr", "+pexpire", "+pttl",
		"+smembers", "+sismember", "+smismember", "+scard", "+sscan", "+srandmember", "+sadd", "+srem",
		"+hget", "+hgetall", "+hscan", "+hset", "+hdel", "+hexists",
		"+zadd", "+zrem", "+zrangebyscore", "+zremrangebyscore",
		"+xadd", "+xack", "+xlen", "+xrange", "+xrevrange", "+xpending",
		"+xinfo|groups", "+xinfo|stream", "+xinfo|consumers", "+xgroup|create", "+xgroup|delconsumer", "+xgroup|setid",
		"+xreadgroup", "+xautoclaim", "+xread", "+xtrim",
		"+publish", "+subscribe", "+unsubscribe",
		"+evalsha", "+eval", "+script|load",
		"+watch", "+unwatch", "+multi", "+exec",
		"+wait",
		"+client|id", "+client|tracking",
	}
)

// waitStreams is the waiter's private nudge streams
// (redisbroker.WaitForEntries: "__protctl__:wait:<random>").
const waitStreams = "__protctl__:wait:*"

// runtimeKeys: redisstore's keys (members, node status, Kafka lease
// groups' leases, generations and checkpoints, the parked index and its
// subscriptions set) and the audit stream.
const runtimeKeys = "protctl:*"

// For derives role's profile.
func For(role Role, o Options) (Profile, error) {
	if _, err := ParseRole(string(role)); err != nil {
		return Profile{}, err
	}
	if o.User == "" {
		o.User = DefaultUser(role)
	}
	if err := validName("user", o.User); err != nil {
		return Profile{}, err
	}
	for _, c := range o.Categories {
		if err := validName("category", c); err != nil {
			return Profile{}, err
		}
	}
	for _, g := range o.Groups {
		if err := validName("group", g); err != nil {
			return Profile{}, err
		}
	}
	if len(o.Groups) > 0 && len(o.Categories) == 0 {
		// Without categories, a partition's lanes (C:K) are any name, so
		// the groups' lease keys would be matched anyway.
		return Profile{}, errors.New("acl: groups narrow the key patterns only together with categories")
	}
	p := Profile{Role: role, User: o.User, Layout: o.Layout.String(), Channels: []string{}}

	cmds := slices.Clone(connectionCommands)
	if o.Layout.IsCluster() {
		cmds = append(cmds, clusterCommands...)
	}
	switch role {
	case ReadOnly:
		cmds = append(cmds, readCommands...)
	case Operator:
		cmds = append(cmds, readCommands...)
		cmds = append(cmds, operatorCommands...)
	case Node:
		cmds = append(cmds, nodeCommands...)
	}
	p.Commands = dedup(cmds)

	keys := keyPatterns(o)
	switch role {
	case ReadOnly:
		// Read-only selectors for everything; the members ZSET is also
		// granted read-write because nodes ls reads it with a script
		// (EVALSHA), and Redis checks a script's KEYS for write access.
		// Without a write command among the role's commands, a script can
		// still only read.
		for _, k := range keys {
			p.Keys = append(p.Keys, "%R~"+k)
		}
		p.Keys = append(p.Keys, "~"+membersKeys)
	case Operator:
		for _, k := range keys {
			p.Keys = append(p.Keys, "~"+k)
		}
		p.Channels = channelPatterns(o)
	case Node:
		for _, k := range keys {
			p.Keys = append(p.Keys, "~"+k)
		}
		if !covered(keys, waitStreams) {
			p.Keys = append(p.Keys, "~"+waitStreams)
		}
		// The invalidation messages of the node's tracking connection
		// (redisbroker.WatchAppends), redirected to itself.
		p.Channels = append(channelPatterns(o), "&"+trackingChannel)
	}
	p.SetUser = "ACL SETUSER " + strings.Join(append([]string{p.User, "reset", "on"}, p.Rules()...), " ")
	p.ACLFileLine = "user " + strings.Join(append([]string{p.User, "reset", "on"}, p.Rules()...), " ")
	return p, nil
}

// trackingChannel is where Redis sends a RESP2 tracking connection's
// invalidation messages.
const trackingChannel = "__redis__:invalidate"

// membersKeys matches redisstore.MembersKey of every service.
const membersKeys = "protctl:{*}:members"

// keyPatterns are the role-independent patterns of every key protctl
// names in o's layout.
func keyPatterns(o Options) []string {
	if len(o.Categories) == 0 {
		if o.Layout.IsCluster() {
			// Indexes and registries; every key with a hash tag after a
			// ':' (C:{K}, lanes, dead letters, G:{K}:__lease__,
			// G:{K}:__generation__, parked records); the runtime's keys.
			return []string{"*:__partitions__", "*:__groups__", "*:{*}*", runtimeKeys}
		}
		// C:K and G:K:__lease__ with any C, G and K: every name with a
		// ':' in it (the runtime's keys included).
		return []string{"*:*"}
	}
	var out []string
	// C:__partitions__, C:__groups__, C:K, C:{K}, lanes, dead letters.
	for _, c := range o.Categories {
		out = append(out, escapeGlob(c)+":*")
	}
	// G:K:__lease__, G:K:__generation__ and the parked records
	// G:K:__lease__:parked:... (G:{K}:... in the cluster layout).
	switch {
	case len(o.Groups) > 0:
		for _, g := range o.Groups {
			if o.Layout.IsCluster() {
				out = append(out, escapeGlob(g)+":{*}:*")
			} else {
				out = append(out, escapeGlob(g)+":*")
			}
		}
	case o.Layout.IsCluster():
		out = append(out, "*:{*}:__lease__*", "*:{*}:__generation__")
	default:
		out = append(out, "*:__lease__*", "*:__generation__")
	}
	return dedup(append(out, runtimeKeys))
}

// covered reports whether patterns already match every key pattern p
// would add (the Protean layout's "*:*").
func covered(patterns []string, p string) bool {
	return slices.Contains(patterns, "*:*") && strings.Contains(p, ":")
}

// channelPatterns: the categories' wake-up channels (C:__wake__, published
// by publish.lua and record.lua, subscribed to by the runtime's watcher)
// the ledger's request channels (protctl:parked:<sub>:requests,
// published by parked retry/skip, subscribed to by the runtime) and the
// seek request channels (protctl:seeks:<group>:requests, published by
// partitions seek, subscribed to by the runtime).
func channelPatterns(o Options) []string {
	var out []string
	if len(o.Categories) > 0 {
		for _, c := range o.Categories {
			out = append(out, "&"+escapeGlob(o.Layout.WakeChannel(c)))
		}
	} else {
		out = append(out, "&"+o.Layout.WakeChannel("*"))
	}
	// The parked requests, partition seek requests (decision 0043),
	// topic seek requests (decision 0044) and, per service, the operator
	// placement's change signal (redisstore.PlacementChannel) and the
	// pauses' (redisstore.PausesChannel, decision 0045).
	return append(out, "&protctl:parked:*:requests", "&protctl:seeks:*:requests", "&protctl:{*}:seeks", "&protctl:{*}:placement", "&protctl:pauses:*")
}

// validName refuses names an ACL rule cannot carry: empty, or with
// whitespace, quotes or control characters (an ACL file line is split at
// spaces and cannot quote).
func validName(what, s string) error {
	if s == "" {
		return fmt.Errorf("acl: %s must not be empty", what)
	}
	for _, r := range s {
		if r <= ' ' || r == 0x7f || r == '"' || r == '\'' {
			return fmt.Errorf("acl: %s %q: must not contain spaces, quotes or control characters", what, s)
		}
	}
	return nil
}

// escapeGlob makes s match itself in a Redis glob pattern.
func escapeGlob(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

func dedup(s []string) []string {
	seen := make(map[string]bool, len(s))
	out := make([]string, 0, len(s))
	for _, v := range s {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}
