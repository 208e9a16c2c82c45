package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// Dynamic shell completion: the names an operator would otherwise copy
// from a listing (categories, partition keys, groups, subscriptions,
// aggregates, streams, services) are read from Redis while the shell
// waits, so every lookup is bounded by completionTimeout and can never
// hang the shell:
//
//   - the lookup runs on its own client (dial, read and write timeouts of
//     completionTimeout, whatever --timeout says) and under a context with
//     that deadline; the caller stops waiting at the deadline even if the
//     client does not, and the client is closed when its call returns;
//   - what was found by the deadline is offered (a keyspace scan of a large
//     server may not finish); when nothing was found and the lookup failed
//     or timed out, the directive is NoFileComp|Error, so the shell offers
//     nothing rather than file names, and says nothing on the terminal;
//   - at most maxCompletions names are offered.
//
// The wiring follows the command tree rather than a list in each command's
// file: attachDynamicCompletion reads the argument placeholders of each
// command's Use line (CATEGORY, KEY, SUBSCRIPTION, AGGREGATE, STREAM,
// "[KEY...]" repeats) and the names of its flags (--group, --category,
// --subscription, --service), so a new command that follows the
// conventions of docs/cli.md completes without further code. A command
// that sets its own ValidArgs, ValidArgsFunction or flag completion keeps
// it.

// completionTimeout bounds one dynamic completion, from dial to answer.
const completionTimeout = time.Second

// maxCompletions caps the names one completion offers.
const maxCompletions = 1000

// argKind is what a positional argument names, from its placeholder.
type argKind string

const (
	argCategory     argKind = "CATEGORY"
	argKey          argKind = "KEY"
	argSubscription argKind = "SUBSCRIPTION"
	argAggregate    argKind = "AGGREGATE"
	argStream       argKind = "STREAM"
	argTopic        argKind = "TOPIC"
)

var completedArgs = []argKind{argCategory, argKey, argSubscription, argAggregate, argStream, argTopic}

// placeholder is one argument of a Use line: "CATEGORY", "[KEY...]".
type placeholder struct {
	kind   argKind
	repeat bool
}

// usePlaceholders parses the positional arguments of a Use line. A flag
// and its value placeholder are skipped ("ls --service S [TOPIC...]"); an
// alternative ends the arguments ("retry SUBSCRIPTION AGGREGATE | --all").
// Unknown placeholders (PLAN, NAME) are kept, so positions stay right, but
// are not completed.
func usePlaceholders(use string) []placeholder {
	fields := strings.Fields(use)
	if len(fields) < 2 {
		return nil
	}
	var out []placeholder
	for i := 1; i < len(fields); i++ {
		tok := fields[i]
		if tok == "|" {
			break
		}
		if strings.HasPrefix(tok, "-") {
			if i+1 < len(fields) && isPlaceholderName(fields[i+1]) {
				i++ // the flag's value
			}
			continue
		}
		name := strings.Trim(tok, "[]")
		name, repeat := strings.CutSuffix(name, "...")
		if !isPlaceholderName(name) {
			break // not a placeholder: "bash|zsh|fish|powershell"
		}
		out = append(out, placeholder{kind: argKind(name), repeat: repeat})
	}
	return out
}

// isPlaceholderName reports an upper-case name: CATEGORY, N, PLAN.
func isPlaceholderName(s string) bool {
	return s != "" && strings.IndexFunc(s, func(r rune) bool { return !unicode.IsUpper(r) && r != '_' }) < 0
}

// kindAt is the placeholder of the positional argument at index i.
func kindAt(ph []placeholder, i int) (argKind, bool) {
	switch {
	case i < len(ph):
		return ph[i].kind, true
	case len(ph) > 0 && ph[len(ph)-1].repeat:
		return ph[len(ph)-1].kind, true
	}
	return "", false
}

// argValues returns the arguments given so far for placeholders of kind.
func argValues(ph []placeholder, args []string, kind argKind) []string {
	var out []string
	for i, a := range args {
		if k, ok := kindAt(ph, i); ok && k == kind {
			out = append(out, a)
		}
	}
	return out
}

// flagCompleters are the flags completed by name, wherever they appear.
var flagCompleters = map[string]completeFn{
	"category":     (*compSession).categories,
	"group":        (*compSession).groups,
	"subscription": (*compSession).subscriptions,
	"service":      (*compSession).services,
}

// attachDynamicCompletion walks the tree and gives each command the
// completion its Use line and flags call for (see above). It never
// replaces a completion a command set itself.
func attachDynamicCompletion(root *cobra.Command, f *Factory) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		ph := usePlaceholders(c.Use)
		if c.ValidArgsFunction == nil && len(c.ValidArgs) == 0 && slices.ContainsFunc(ph, func(p placeholder) bool {
			return slices.Contains(completedArgs, p.kind)
		}) {
			c.ValidArgsFunction = f.argCompletion(ph)
		}
		for name, fn := range flagCompleters {
			if c.LocalFlags().Lookup(name) == nil {
				continue
			}
			if _, has := c.GetFlagCompletionFunc(name); has {
				continue
			}
			_ = c.RegisterFlagCompletionFunc(name, f.flagCompletion(ph, fn))
		}
	}
	walk(root)
}

// compQuery is what a completion knows of the command line so far.
type compQuery struct {
	cmd        *cobra.Command
	ph         []placeholder
	args       []string
	toComplete string
}

// completeFn adds the candidates for q.toComplete to s.
type completeFn func(s *compSession, ctx context.Context, q *compQuery) error

func (f *Factory) argCompletion(ph []placeholder) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		kind, ok := kindAt(ph, len(args))
		if !ok {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		q := &compQuery{cmd: cmd, ph: ph, args: args, toComplete: toComplete}
		var fn completeFn
		switch kind {
		case argCategory:
			fn = (*compSession).categories
		case argKey:
			fn = (*compSession).keys
		case argSubscription:
			fn = (*compSession).subscriptions
		case argAggregate:
			fn = (*compSession).aggregates
		case argStream:
			fn = (*compSession).streams
		case argTopic:
			fn = (*compSession).topics
		default:
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return f.completeWith(q, fn)
	}
}

func (f *Factory) flagCompletion(ph []placeholder, fn completeFn) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return f.completeWith(&compQuery{cmd: cmd, ph: ph, args: args, toComplete: toComplete}, fn)
	}
}

// completeWith runs fn on a client of its own under completionTimeout
// and returns what it found by then.
func (f *Factory) completeWith(q *compQuery, fn completeFn) ([]cobra.Completion, cobra.ShellCompDirective) {
	fail := cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveError
	s, err := f.Settings()
	if err != nil {
		cobra.CompDebugln("protctl: "+err.Error(), false)
		return nil, fail
	}
	// No retries: a refused connection answers at once rather than after
	// go-redis's backoff, and a slow one is cut by the deadline anyway.
	noRetry := *s
	noRetry.Redis.URL = withQueryDefault(s.Redis.URL, "max_retries", "-1")
	client, err := newRedisClient(&noRetry, completionTimeout)
	if err != nil {
		cobra.CompDebugln("protctl: "+err.Error(), false)
		return nil, fail
	}
	parent := q.cmd.Context()
	if parent == nil {
		parent = context.Background()
	}
	ctx, cancel := context.WithTimeout(parent, completionTimeout)
	defer cancel()

	sess := &compSession{c: client, layout: s.Layout, contextCategories: s.Categories, seen: map[string]bool{}}
	done := make(chan error, 1)
	go func() {
		defer client.Close()
		done <- fn(sess, ctx, q)
	}()
	select {
	case err = <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	got, directive := sess.result()
	if err != nil && !errors.Is(err, errEnough) {
		cobra.CompDebugln(fmt.Sprintf("protctl: completion: %v (%d found)", err, len(got)), false)
		if len(got) == 0 {
			return nil, fail
		}
	}
	return got, directive
}

// withQueryDefault sets a query parameter of rawURL that it does not set.
func withQueryDefault(rawURL, name, value string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return rawURL // newRedisClient reports it
	}
	q := u.Query()
	if q.Has(name) {
		return rawURL
	}
	q.Set(name, value)
	u.RawQuery = q.Encode()
	return u.String()
}

// errEnough stops a lookup that has found maxCompletions names.
var errEnough = errors.New("enough completions")

// compSession collects the candidates of one completion; the lookup adds
// them while the caller may take them at the deadline.
type compSession struct {
	c                 redis.UniversalClient
	layout            broker.Layout
	contextCategories []string

	mu        sync.Mutex
	items     []cobra.Completion
	seen      map[string]bool
	directive cobra.ShellCompDirective
}

// add offers names that start with prefix; errEnough once the cap is hit.
func (s *compSession) add(prefix string, names ...string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range names {
		if n == "" || !strings.HasPrefix(n, prefix) || s.seen[n] {
			continue
		}
		if len(s.items) >= maxCompletions {
			return errEnough
		}
		s.seen[n] = true
		s.items = append(s.items, n)
	}
	return nil
}

// noSpace marks the candidates as prefixes to go on typing after.
func (s *compSession) noSpace() {
	s.mu.Lock()
	s.directive |= cobra.ShellCompDirectiveNoSpace
	s.mu.Unlock()
}

func (s *compSession) result() ([]cobra.Completion, cobra.ShellCompDirective) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := slices.Clone(s.items)
	slices.Sort(out)
	return out, s.directive | cobra.ShellCompDirectiveNoFileComp
}

// categories offers the context's categories and those whose index a
// SCAN for *:__partitions__ finds.
func (s *compSession) categories(ctx context.Context, q *compQuery) error {
	if err := s.add(q.toComplete, s.contextCategories...); err != nil {
		return err
	}
	return s.eachCategory(ctx, func(name string) error { return s.add(q.toComplete, name) })
}

// eachCategory calls fn with each category a SCAN finds (the same name
// may come more than once).
func (s *compSession) eachCategory(ctx context.Context, fn func(string) error) error {
	suffix := s.layout.IndexKey("")
	return scanKeys(ctx, s.c, "*"+globEscape(suffix), "set", func(key string) error {
		if name, ok := strings.CutSuffix(key, suffix); ok && name != "" {
			return fn(name)
		}
		return nil
	})
}

// allCategories is the context's categories and the scanned ones, for
// lookups that need them before offering anything.
func (s *compSession) allCategories(ctx context.Context) ([]string, error) {
	names := slices.Clone(s.contextCategories)
	err := s.eachCategory(ctx, func(n string) error { names = append(names, n); return nil })
	slices.Sort(names)
	return slices.Compact(names), err
}

// keys offers the partition keys of the command's CATEGORY argument,
// read from its index with SSCAN MATCH prefix*; keys already given are
// left out.
func (s *compSession) keys(ctx context.Context, q *compQuery) error {
	cats := argValues(q.ph, q.args, argCategory)
	if len(cats) == 0 {
		return nil
	}
	given := argValues(q.ph, q.args, argKey)
	return s.scanIndex(ctx, cats[0], q.toComplete, func(k string) error {
		if slices.Contains(given, k) {
			return nil
		}
		return s.add(q.toComplete, k)
	})
}

// scanIndex calls fn with each key of category's index that starts with
// prefix.
func (s *compSession) scanIndex(ctx context.Context, category, prefix string, fn func(string) error) error {
	var cursor uint64
	for {
		keys, next, err := s.c.SScan(ctx, s.layout.IndexKey(category), cursor, globEscape(prefix)+"*", 1000).Result()
		if err != nil {
			return err
		}
		for _, k := range keys {
			if err := fn(k); err != nil {
				return err
			}
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}

// groupSample is how many partitions of a category are asked for their
// consumer groups when no key is given.
const groupSample = 10

// groups offers consumer groups: those registered in C:__groups__ and
// those on the streams of the partition (when KEY is given) or of a
// sample of the category's partitions (Protean registers none). The
// categories are the CATEGORY arguments, else --category, else all.
func (s *compSession) groups(ctx context.Context, q *compQuery) error {
	cats := argValues(q.ph, q.args, argCategory)
	if len(cats) == 0 {
		if fl := q.cmd.Flags().Lookup("category"); fl != nil {
			if vs, err := q.cmd.Flags().GetStringArray("category"); err == nil {
				cats = vs
			} else if v := fl.Value.String(); v != "" {
				cats = []string{v}
			}
		}
	}
	if len(cats) == 0 {
		var err error
		if cats, err = s.allCategories(ctx); err != nil {
			return err
		}
	}
	keys := argValues(q.ph, q.args, argKey)

	p := s.c.Pipeline()
	registered := make([]*redis.StringSliceCmd, len(cats))
	samples := make([]*redis.StringSliceCmd, len(cats))
	for i, c := range cats {
		registered[i] = p.SMembers(ctx, s.layout.GroupsKey(c))
		if len(keys) == 0 {
			samples[i] = p.SRandMemberN(ctx, s.layout.IndexKey(c), groupSample)
		}
	}
	if _, err := p.Exec(ctx); err != nil && !isReplyError(err) {
		return err
	}
	var streams []string
	for i, c := range cats {
		if gs, err := registered[i].Result(); err == nil {
			if err := s.add(q.toComplete, gs...); err != nil {
				return err
			}
		} else if !isReplyError(err) {
			return err
		}
		ks := keys
		if samples[i] != nil {
			ks, _ = samples[i].Result()
		}
		for _, k := range ks {
			streams = append(streams, s.layout.Stream(c, k), s.layout.LaneStream(c, k, broker.DefaultBackfillSuffix))
		}
	}
	if len(streams) == 0 {
		return nil
	}
	p = s.c.Pipeline()
	infos := make([]*redis.XInfoGroupsCmd, len(streams))
	for i, st := range streams {
		infos[i] = p.XInfoGroups(ctx, st)
	}
	_, _ = p.Exec(ctx) // a missing lane is an error reply; the others still count
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, c := range infos {
		gs, err := c.Result()
		if err != nil {
			continue
		}
		for _, g := range gs {
			if err := s.add(q.toComplete, g.Name); err != nil {
				return err
			}
		}
	}
	return nil
}

// subscriptions offers the subscriptions the failure ledger has had
// entries for.
func (s *compSession) subscriptions(ctx context.Context, q *compQuery) error {
	subs, err := s.c.SMembers(ctx, redisstore.ParkedSubscriptionsKey).Result()
	if err != nil {
		return err
	}
	return s.add(q.toComplete, subs...)
}

// aggregates offers the parked aggregates of the SUBSCRIPTION argument.
func (s *compSession) aggregates(ctx context.Context, q *compQuery) error {
	subs := argValues(q.ph, q.args, argSubscription)
	if len(subs) == 0 {
		return nil
	}
	// Both ledger indexes: the current one and the layout before
	// decision 0007, which entries parked by earlier versions are in.
	for _, idx := range []string{redisstore.ParkedEntriesKey(subs[0]), redisstore.ParkedIndexKey(subs[0])} {
		var cursor uint64
		for {
			kv, next, err := s.c.HScan(ctx, idx, cursor, globEscape(q.toComplete)+"*", 1000).Result()
			if err != nil {
				return err
			}
			for i := 0; i < len(kv); i += 2 { // field, value, field, value...
				if err := s.add(q.toComplete, kv[i]); err != nil {
					return err
				}
			}
			if cursor = next; cursor == 0 {
				break
			}
		}
	}
	return nil
}

// streams offers partition streams C:K in two steps: first the categories
// as "C:" (no space after, to go on typing), then, once a category and
// its ':' are typed, that category's partitions.
func (s *compSession) streams(ctx context.Context, q *compQuery) error {
	cats, err := s.allCategories(ctx)
	for _, c := range cats {
		head := s.layout.Stream(c, "")
		if s.layout.IsCluster() {
			head = strings.TrimSuffix(head, "{}")
		}
		if rest, ok := strings.CutPrefix(q.toComplete, head); ok {
			rest = strings.TrimPrefix(rest, "{")
			err := s.scanIndex(ctx, c, rest, func(k string) error {
				return s.add(q.toComplete, s.layout.Stream(c, k))
			})
			if err != nil {
				return err
			}
			continue
		}
		if strings.HasPrefix(head, q.toComplete) {
			if err := s.add(q.toComplete, head); err != nil {
				return err
			}
			s.noSpace()
		}
	}
	return err
}

// topics offers the Kafka topics whose lease groups have keys in Redis
// (protctl:{S|topic:T}:generation:<p>, never deleted), of --service when
// it is given, found by a SCAN.
func (s *compSession) topics(ctx context.Context, q *compQuery) error {
	service := "*"
	if fl := q.cmd.Flags().Lookup("service"); fl != nil && fl.Value.String() != "" && fl.Value.Type() == "string" {
		service = globEscape(fl.Value.String())
	}
	// protctl:{S|topic:T}:generation:0, cut around S and T.
	key := redisstore.TopicLeaseGroup("\x00", "\x01").GenerationKey(0)
	head, rest, _ := strings.Cut(key, "\x00")
	mid, tail, _ := strings.Cut(rest, "\x01")
	tail = strings.TrimSuffix(tail, "0")
	match := globEscape(head) + service + globEscape(mid) + "*" + globEscape(tail) + "*"
	return scanKeys(ctx, s.c, match, "string", func(k string) error {
		_, after, ok := strings.Cut(k, mid)
		if !ok {
			return nil
		}
		topic, _, ok := strings.Cut(after, tail)
		if !ok {
			return nil
		}
		return s.add(q.toComplete, topic)
	})
}

// services offers the services whose nodes keep a membership set
// (protctl:{S}:members), found by a SCAN.
func (s *compSession) services(ctx context.Context, q *compQuery) error {
	head, tail, _ := strings.Cut(redisstore.MembersKey("\x00"), "\x00")
	return scanKeys(ctx, s.c, globEscape(head)+"*"+globEscape(tail), "zset", func(key string) error {
		name, ok := strings.CutPrefix(key, head)
		if !ok {
			return nil
		}
		if name, ok = strings.CutSuffix(name, tail); !ok {
			return nil
		}
		return s.add(q.toComplete, name)
	})
}

// scanKeys runs SCAN MATCH match TYPE typ over the keyspace (each master
// of a cluster, whose scans run concurrently: fn is called under a lock)
// without pausing: completion is bounded by its deadline.
func scanKeys(ctx context.Context, c redis.UniversalClient, match, typ string, fn func(string) error) error {
	var mu sync.Mutex
	one := func(ctx context.Context, c redis.Cmdable) error {
		var cursor uint64
		for {
			keys, next, err := c.ScanType(ctx, cursor, match, 1000, typ).Result()
			if err != nil {
				return err
			}
			mu.Lock()
			for _, k := range keys {
				if err = fn(k); err != nil {
					break
				}
			}
			mu.Unlock()
			if err != nil {
				return err
			}
			if cursor = next; cursor == 0 {
				return nil
			}
		}
	}
	if cc, ok := c.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return one(ctx, m) })
	}
	return one(ctx, c)
}

// globEscape quotes SCAN MATCH metacharacters.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '*', '?', '[', ']', '\\', '^', '-':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// isReplyError reports a Redis error reply (WRONGTYPE and the like), as
// opposed to a connection or deadline error.
func isReplyError(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && !errors.Is(err, context.DeadlineExceeded)
}
