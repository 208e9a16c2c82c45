package acl_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/protctl/protctl/internal/acl"
	"github.com/protctl/protctl/internal/audit"
	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// Lua scripts by role: the node runs every script of the broker and the
// stores; the operator's repairs run these; readonly runs members.lua
// (nodes ls). The shared prelude.lua, lib.lua and the *lib.lua files are
// prepended to them.
var (
	operatorScripts = []string{
		"redisadapter/prelude.lua", "redisbroker/lib.lua", "redisbroker/reaplib.lua", "redisbroker/reap.lua", "redisbroker/reaplanes.lua",
		"redisbroker/release.lua", "redisbroker/trim.lua", "redisbroker/deadletter.lua", "redisbroker/delconsumer.lua",
		"redisbroker/publish.lua", "redisbroker/append.lua", "redisbroker/record.lua",
		"redisbroker/dlqreplay.lua", "redisbroker/dlqdelete.lua",
		"redisbroker/seek.lua", "redisbroker/seekrequest.lua", "redisbroker/seekcancel.lua",
		"redisstore/lib.lua", "redisstore/request.lua", "redisstore/requestpinned.lua", "redisstore/requesttoken.lua",
		"redisstore/members.lua", "redisstore/pause.lua", "redisstore/placementcas.lua",
		"redisstore/seekset.lua", "redisstore/seekrequest.lua", "redisstore/seekwithdraw.lua",
	}
	// operatorOnlyScripts are the operator's that a node never runs.
	operatorOnlyScripts = []string{"redisbroker/dlqreplay.lua", "redisbroker/dlqdelete.lua",
		"redisbroker/seekrequest.lua", "redisbroker/seekcancel.lua", "redisstore/seekwithdraw.lua"}
	readOnlyScripts = []string{"redisadapter/prelude.lua", "redisstore/lib.lua", "redisstore/members.lua"}
)

// scriptDirs are the folders of the Lua scripts, by package.
var scriptDirs = map[string]string{
	"redisadapter": "../../pkg/internal/redisadapter",
	"redisbroker":  "../../pkg/broker/redisbroker",
	"redisstore":   "../../pkg/runtime/redisstore",
}

var (
	callRe     = regexp.MustCompile(`redis\.p?call\(\s*'([A-Za-z]+)'(?:\s*,\s*'([A-Za-z]+)')?`)
	argsListRe = regexp.MustCompile(`\{\s*'([A-Z]+)'\s*,`) // deadletter.lua: local args = {'XADD', ...}
	// typedRe: prelude.lua's typed_call(i, 'stream', 'XACK', ...).
	typedRe    = regexp.MustCompile(`typed_call\([^,()]+,\s*'[a-z]+'\s*,\s*'([A-Z]+)'`)
	containers = map[string]bool{"XINFO": true, "XGROUP": true, "SCRIPT": true, "CLIENT": true, "CLUSTER": true, "OBJECT": true}
)

// scriptRules lists the ACL rules the Lua scripts need: +cmd, or
// +cmd|sub for container commands.
func scriptRules(t *testing.T, files []string) []string {
	t.Helper()
	var rules []string
	for _, f := range files {
		pkg, name, _ := strings.Cut(f, "/")
		b, err := os.ReadFile(filepath.Join(scriptDirs[pkg], name))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range callRe.FindAllStringSubmatch(string(b), -1) {
			cmd := strings.ToLower(m[1])
			if containers[strings.ToUpper(m[1])] && m[2] != "" {
				cmd += "|" + strings.ToLower(m[2])
			}
			rules = append(rules, "+"+cmd)
		}
		for _, m := range argsListRe.FindAllStringSubmatch(string(b), -1) {
			rules = append(rules, "+"+strings.ToLower(m[1]))
		}
		for _, m := range typedRe.FindAllStringSubmatch(string(b), -1) {
			rules = append(rules, "+"+strings.ToLower(m[1]))
		}
	}
	slices.Sort(rules)
	return slices.Compact(rules)
}

func allScripts(t *testing.T) []string {
	t.Helper()
	var out []string
	for pkg, dir := range scriptDirs {
		m, err := filepath.Glob(filepath.Join(dir, "*.lua"))
		if err != nil || len(m) == 0 {
			t.Fatalf("no scripts in %s: %v", dir, err)
		}
		for _, f := range m {
			out = append(out, pkg+"/"+filepath.Base(f))
		}
	}
	return out
}

// TestScriptsCommandsAreGranted is the guard against drift: a command a
// Lua script starts to call must be added to the profiles of the roles
// that run the script.
func TestScriptsCommandsAreGranted(t *testing.T) {
	for _, c := range []struct {
		role    acl.Role
		scripts []string
	}{
		{acl.Node, slices.DeleteFunc(allScripts(t), func(f string) bool { return slices.Contains(operatorOnlyScripts, f) })},
		{acl.Operator, operatorScripts},
		{acl.ReadOnly, readOnlyScripts},
	} {
		p, err := acl.For(c.role, acl.Options{})
		if err != nil {
			t.Fatal(err)
		}
		rules := scriptRules(t, c.scripts)
		if len(rules) < 3 {
			t.Fatalf("found only %v in the scripts", rules)
		}
		for _, r := range append(rules, "+evalsha", "+eval") {
			if !slices.Contains(p.Commands, r) {
				t.Errorf("%s: the scripts call %s, which the profile does not grant", c.role, r)
			}
		}
	}
}

func TestProfilesUseExplicitCommandsOnly(t *testing.T) {
	for _, role := range acl.Roles() {
		for _, layout := range []broker.Layout{broker.ProteanLayout, broker.ClusterLayout} {
			p, err := acl.For(role, acl.Options{Layout: layout})
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range p.Commands {
				if !strings.HasPrefix(c, "+") || strings.Contains(c, "@") || c == "+flushall" || c == "+flushdb" || c == "+keys" || c == "+acl" || c == "+config" {
					t.Errorf("%s/%s: rule %q", role, layout, c)
				}
			}
			if p.User != acl.DefaultUser(role) || p.Role != role || p.Layout != layout.String() {
				t.Errorf("profile %+v", p)
			}
			want := "ACL SETUSER " + p.User + " reset on " + strings.Join(p.Rules(), " ")
			if p.SetUser != want || p.ACLFileLine != "user "+p.User+" reset on "+strings.Join(p.Rules(), " ") {
				t.Errorf("lines:\n%s\n%s", p.SetUser, p.ACLFileLine)
			}
		}
	}
}

func TestOptions(t *testing.T) {
	if _, err := acl.ParseRole("admin"); !errors.Is(err, acl.ErrUnknownRole) || !strings.Contains(err.Error(), "readonly, operator, node") {
		t.Fatalf("ParseRole(admin): %v", err)
	}
	if _, err := acl.For("admin", acl.Options{}); !errors.Is(err, acl.ErrUnknownRole) {
		t.Fatalf("For(admin): %v", err)
	}
	for _, o := range []acl.Options{
		{User: "a b"}, {User: `"x"`}, {Categories: []string{""}}, {Categories: []string{"a\tb"}},
		{Groups: []string{"g"}}, // groups need categories
	} {
		if _, err := acl.For(acl.ReadOnly, o); err == nil {
			t.Errorf("For(%+v) accepted", o)
		}
	}
	p, err := acl.For(acl.Node, acl.Options{User: "n1", Categories: []string{"shop::order", "a*b"}, Groups: []string{"proj"}})
	if err != nil {
		t.Fatal(err)
	}
	wantKeys := []string{"~shop::order:*", `~a\*b:*`, "~proj:*", "~protctl:*", "~__protctl__:wait:*"}
	if !slices.Equal(p.Keys, wantKeys) {
		t.Fatalf("keys %v, want %v", p.Keys, wantKeys)
	}
	wantChannels := []string{"&shop::order:__wake__", `&a\*b:__wake__`, "&protctl:parked:*:requests", "&protctl:seeks:*:requests", "&protctl:{*}:seeks", "&protctl:{*}:placement", "&protctl:pauses:*", "&__redis__:invalidate"}
	if !slices.Equal(p.Channels, wantChannels) {
		t.Fatalf("channels %v, want %v", p.Channels, wantChannels)
	}
	ro, _ := acl.For(acl.ReadOnly, acl.Options{})
	if len(ro.Channels) != 0 || ro.Channels == nil {
		t.Fatalf("readonly channels %#v, want none (and [] in JSON)", ro.Channels)
	}
}

// TestRulesOnARealServer applies every profile (both layouts, broad and
// narrowed) on a real redis-server and asks it (ACL DRYRUN) what each
// user may do: the commands each role needs on the keys the layouts
// name, and the writes the readonly role must not do. It also checks,
// from the server's own command table, that the readonly role grants no
// command flagged "write".
func TestRulesOnARealServer(t *testing.T) {
	srv := testenv.StartRedis(t)
	c := srv.Client(t)
	ctx := context.Background()
	type check struct {
		role  acl.Role
		allow bool
		args  []any
	}
	for _, layout := range []broker.Layout{broker.ProteanLayout, broker.ClusterLayout} {
		for _, narrowed := range []bool{false, true} {
			o := acl.Options{Layout: layout}
			if narrowed {
				o.Categories, o.Groups = []string{"shop::order"}, []string{"proj"}
			}
			users := map[acl.Role]string{}
			for _, role := range acl.Roles() {
				o.User = "u-" + string(role)
				p, err := acl.For(role, o)
				if err != nil {
					t.Fatal(err)
				}
				args := []any{}
				for _, f := range strings.Fields(p.SetUser) {
					args = append(args, f)
				}
				if err := c.Do(ctx, args...).Err(); err != nil {
					t.Fatalf("%s: %v", p.SetUser, err)
				}
				users[role] = o.User
			}
			l := layout
			stream := l.Stream("shop::order", "k1")
			lease := l.LeaseKey("proj", "k1")
			index := l.IndexKey("shop::order")
			parkedRec := redisstore.RecordKey(lease, "proj", "k1")
			checks := []check{
				{acl.ReadOnly, true, []any{"XRANGE", stream, "-", "+"}},
				{acl.ReadOnly, true, []any{"XINFO", "GROUPS", stream}},
				{acl.ReadOnly, true, []any{"GET", lease}},
				{acl.ReadOnly, true, []any{"SMEMBERS", index}},
				{acl.ReadOnly, true, []any{"GET", parkedRec}},
				{acl.ReadOnly, true, []any{"XREVRANGE", acl.AuditStream, "+", "-"}},
				{acl.ReadOnly, true, []any{"HGETALL", redisstore.ParkedIndexKey("proj")}},
				{acl.ReadOnly, false, []any{"XADD", stream, "*", "a", "b"}},
				{acl.ReadOnly, false, []any{"DEL", lease}},
				{acl.ReadOnly, false, []any{"SREM", index, "k1"}},
				{acl.ReadOnly, false, []any{"XADD", acl.AuditStream, "*", "a", "b"}},
				{acl.ReadOnly, false, []any{"PUBLISH", l.WakeChannel("shop::order"), "k1"}},
				{acl.ReadOnly, false, []any{"FLUSHALL"}},
				{acl.ReadOnly, false, []any{"CONFIG", "GET", "requirepass"}},
				{acl.Operator, true, []any{"XADD", acl.AuditStream, "MAXLEN", "~", "10000", "*", "a", "b"}},
				{acl.Operator, true, []any{"DEL", lease}},
				{acl.Operator, true, []any{"XTRIM", stream, "MAXLEN", "1"}},
				{acl.Operator, true, []any{"PUBLISH", redisstore.RequestsChannel("proj"), "k1"}},
				{acl.Operator, false, []any{"XGROUP", "CREATE", stream, "g", "0"}},
				{acl.Operator, true, []any{"INCR", l.GenerationKey("proj", "k1")}}, // skip-head's operator lease
				{acl.Operator, false, []any{"FLUSHALL"}},
				{acl.Node, true, []any{"INCR", l.GenerationKey("proj", "k1")}},
				{acl.Node, true, []any{"XGROUP", "CREATE", stream, "proj", "0", "MKSTREAM"}},
				{acl.Node, true, []any{"XREADGROUP", "GROUP", "proj", "c", "STREAMS", stream, ">"}},
				{acl.Node, true, []any{"SET", redisstore.NodeKey("shop", "n1"), "{}"}},
				{acl.Node, true, []any{"HSET", redisstore.TopicLeaseGroup("shop", "orders").CheckpointsKey("ledger"), "0", "1"}},
				{acl.Node, true, []any{"SUBSCRIBE", l.WakeChannel("shop::order")}},
				{acl.Node, true, []any{"SUBSCRIBE", redisstore.RequestsChannel("proj")}},
				{acl.Node, false, []any{"FLUSHALL"}},
				{acl.Node, false, []any{"KEYS", "*"}},
			}
			if narrowed {
				checks = append(checks,
					check{acl.ReadOnly, false, []any{"XRANGE", l.Stream("other", "k1"), "-", "+"}},
					check{acl.Operator, false, []any{"DEL", l.LeaseKey("other-group", "k1")}},
					check{acl.Node, false, []any{"SUBSCRIBE", l.WakeChannel("other")}},
				)
			}
			for _, ch := range checks {
				args := append([]any{"ACL", "DRYRUN", users[ch.role]}, ch.args...)
				// ACL DRYRUN replies OK, or says why not.
				reply, err := c.Do(ctx, args...).Text()
				if err != nil {
					t.Fatalf("ACL DRYRUN %v: %v", args, err)
				}
				if (reply == "OK") != ch.allow {
					t.Errorf("%s layout, narrowed %v: %s %v: %q, want allowed %v", layout, narrowed, ch.role, ch.args, reply, ch.allow)
				}
			}
		}
	}

	ro, _ := acl.For(acl.ReadOnly, acl.Options{Layout: broker.ClusterLayout})
	for _, rule := range ro.Commands {
		name := strings.ReplaceAll(strings.TrimPrefix(rule, "+"), "|", " ")
		if name == "eval" || name == "evalsha" {
			continue // scripts: what they may call is the role's commands
		}
		reply, err := c.Do(ctx, "COMMAND", "INFO", strings.Fields(name)[0]).Slice()
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range reply {
			ci, ok := doc.([]any)
			if !ok || len(ci) < 3 {
				t.Fatalf("%s: unknown command (%v)", rule, doc)
			}
			var flags []string
			fl, _ := ci[2].([]any)
			for _, f := range fl {
				flags = append(flags, fmt.Sprint(f))
			}
			if slices.Contains(flags, "write") {
				t.Errorf("readonly grants %s, a write command", rule)
			}
		}
	}
}

func TestAuditStreamIsTheAuditLog(t *testing.T) {
	if acl.AuditStream != audit.Key {
		t.Fatalf("acl.AuditStream %q, the audit log is %q", acl.AuditStream, audit.Key)
	}
}
