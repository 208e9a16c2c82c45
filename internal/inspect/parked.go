package inspect

import (
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"regexp/syntax"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime/ledger"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
	"github.com/protctl/protctl/pkg/runtime/source"
)

// ErrInvalidFilter is wrapped by the *FilterError that
// ParkedFilterSpec.Compile and SelectParked return for a filter that
// cannot select anything sensibly.
var ErrInvalidFilter = errors.New("inspect: invalid filter")

// FilterError names the filter field that is wrong. Field is the spec's
// name for it (the CLI flag without its dashes): "error", "error-class",
// "older-than", "newer-than", "key", "position".
type FilterError struct {
	Field  string
	Value  string
	Reason string
}

func (e *FilterError) Error() string {
	return fmt.Sprintf("inspect: invalid filter %s %s: %s", e.Field, e.Value, e.Reason)
}

func (e *FilterError) Unwrap() error { return ErrInvalidFilter }

// ParkedFilterSpec is a filter of ledger entries as an operator writes it
// (the CLI's flags, the dashboard's form); Compile checks and compiles it.
// The zero value selects every entry. String gives it back as flags,
// which plans record (repair.Selection.Filter).
type ParkedFilterSpec struct {
	// Subscription: only this subscription's entries.
	Subscription string
	// Aggregate: only this aggregate's entries (exact).
	Aggregate string
	// Partition: only entries on this partition (Kafka: the number;
	// Redis: the partition key).
	Partition string
	// Error: entries whose error message matches this regular expression
	// (RE2 syntax, unanchored).
	Error string
	// ErrorClass: entries whose error is this class: the message equals
	// it, or starts with it followed by ": " (an error wrapped by it, in
	// Go's convention). "http POST http://billing" selects "http POST
	// http://billing: 503 Service Unavailable".
	ErrorClass string
	// OlderThan: entries parked at least this long ago (server clock);
	// 0 for any.
	OlderThan time.Duration
	// NewerThan: entries parked less than this long ago; 0 for any.
	NewerThan time.Duration
	// Key: entries whose aggregate (the Redis partition key, or the
	// Kafka aggregate) matches this glob: * any run, ? one character,
	// [abc] [a-z] [!a] one of or not, \ escapes; it matches the whole
	// name, '/' and ':' included.
	Key string
	// Position: entries whose position is in FROM..TO, inclusive, either
	// side optional: stream entry ids for Redis partitions (a bare
	// millisecond time is ms-0 as FROM and the last id of that
	// millisecond as TO, as in XRANGE), offsets for Kafka.
	Position string
}

// IsZero reports whether s selects every entry.
func (s ParkedFilterSpec) IsZero() bool { return s == ParkedFilterSpec{} }

// String is the spec as the CLI's flags, quoted for a POSIX shell, for
// plans and messages: `--subscription ledger-sync --error '50[34]'`; ""
// for the zero spec.
func (s ParkedFilterSpec) String() string {
	var parts []string
	add := func(flag, v string) {
		if v != "" {
			parts = append(parts, "--"+flag+" "+shellQuote(v))
		}
	}
	add("subscription", s.Subscription)
	add("aggregate", s.Aggregate)
	add("partition", s.Partition)
	add("error", s.Error)
	add("error-class", s.ErrorClass)
	if s.OlderThan != 0 {
		add("older-than", s.OlderThan.String())
	}
	if s.NewerThan != 0 {
		add("newer-than", s.NewerThan.String())
	}
	add("key", s.Key)
	add("position", s.Position)
	return strings.Join(parts, " ")
}

// shellQuote quotes s for a POSIX shell when it needs it (as
// present.ShellQuote, which this package cannot import).
func shellQuote(s string) string {
	if s != "" && !strings.ContainsAny(s, " \t\n'\"\\$`!*?[]{}()<>|&;#~") {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// ParkedFilter is a compiled ParkedFilterSpec. The zero value selects
// every entry.
type ParkedFilter struct {
	Spec     ParkedFilterSpec
	errorRE  *regexp.Regexp
	keyRE    *regexp.Regexp
	position *positionRange
}

// Compile checks s and compiles it. A malformed regexp or glob, a
// negative age, an age window that is empty (--older-than not below
// --newer-than) and a range whose FROM is after its TO are
// *FilterErrors naming the field.
func (s ParkedFilterSpec) Compile() (ParkedFilter, error) {
	f := ParkedFilter{Spec: s}
	bad := func(field, value, reason string) (ParkedFilter, error) {
		return ParkedFilter{}, &FilterError{Field: field, Value: value, Reason: reason}
	}
	if s.Error != "" {
		re, err := regexp.Compile(s.Error)
		if err != nil {
			var se *syntax.Error
			reason := err.Error()
			if errors.As(err, &se) {
				reason = fmt.Sprintf("not a regular expression (RE2 syntax): %s: %s", se.Code, se.Expr)
			}
			return bad("error", strconv.Quote(s.Error), reason)
		}
		f.errorRE = re
	}
	if s.OlderThan < 0 {
		return bad("older-than", s.OlderThan.String(), "an age must not be negative")
	}
	if s.NewerThan < 0 {
		return bad("newer-than", s.NewerThan.String(), "an age must not be negative")
	}
	if s.OlderThan > 0 && s.NewerThan > 0 && s.OlderThan >= s.NewerThan {
		return bad("older-than", s.OlderThan.String(), fmt.Sprintf(
			"with newer-than %s nothing can match: an entry cannot be parked at least %s and less than %s ago (the window is inverted)",
			s.NewerThan, s.OlderThan, s.NewerThan))
	}
	if s.Key != "" {
		re, err := compileGlob(s.Key)
		if err != nil {
			return bad("key", strconv.Quote(s.Key), err.Error())
		}
		f.keyRE = re
	}
	if s.Position != "" {
		r, err := parsePositionRange(s.Position)
		if err != nil {
			return bad("position", strconv.Quote(s.Position), err.Error())
		}
		f.position = r
	}
	return f, nil
}

// Match reports whether p passes every field of the filter, with ages
// measured at now. A Redis entry's position is compared as a stream id,
// a Kafka entry's as an offset; an unparsable position matches no range.
func (f ParkedFilter) Match(p ledger.Parked, now time.Time) bool {
	return f.matchButPosition(p, now) && (f.position == nil || f.position.match(p))
}

// matchButPosition is Match without the position range.
func (f ParkedFilter) matchButPosition(p ledger.Parked, now time.Time) bool {
	s := f.Spec
	switch {
	case s.Subscription != "" && p.Subscription != s.Subscription,
		s.Aggregate != "" && p.Aggregate != s.Aggregate,
		s.Partition != "" && p.Partition != s.Partition,
		f.errorRE != nil && !f.errorRE.MatchString(p.Error),
		s.ErrorClass != "" && p.Error != s.ErrorClass && !strings.HasPrefix(p.Error, s.ErrorClass+": "),
		s.OlderThan > 0 && now.Sub(p.ParkedAt) < s.OlderThan,
		s.NewerThan > 0 && now.Sub(p.ParkedAt) >= s.NewerThan,
		f.keyRE != nil && !f.keyRE.MatchString(p.Aggregate):
		return false
	}
	return true
}

// ParkedSelection is what SelectParked found.
type ParkedSelection struct {
	// Entries are the matching entries, oldest ParkedAt first.
	Entries []ledger.Parked
	// Scanned counts the entries read (of the subscription, or of all).
	Scanned int
	// Now is the server's time the ages were measured at.
	Now time.Time
}

// SelectParked reads the ledger (the filter's subscription, or every
// one) and the server's clock, and returns the entries f matches. A
// position range with an entry id bound (ms-seq) over Kafka entries is a
// *FilterError: their positions are offsets.
func (in *Inspector) SelectParked(ctx context.Context, f ParkedFilter) (ParkedSelection, error) {
	if in.cfg.ledger == nil {
		return ParkedSelection{}, errNoLedger
	}
	now, err := in.serverTime(ctx)
	if err != nil {
		return ParkedSelection{}, err
	}
	all, err := in.cfg.ledger.ListParked(ctx, f.Spec.Subscription)
	if err != nil {
		return ParkedSelection{}, err
	}
	sel := ParkedSelection{Scanned: len(all), Now: now}
	for _, p := range all {
		if f.position != nil && f.position.idBound && p.Source == source.Kafka && f.matchButPosition(p, now) {
			return ParkedSelection{}, &FilterError{Field: "position", Value: strconv.Quote(f.Spec.Position), Reason: fmt.Sprintf(
				"a bound with a sequence number (ms-seq) is a stream entry id, but %q of subscription %q is a Kafka entry whose position is an offset: use plain numbers",
				p.Aggregate, p.Subscription)}
		}
		if f.Match(p, now) {
			sel.Entries = append(sel.Entries, p)
		}
	}
	return sel, nil
}

// ParkedSubscriptions returns the subscriptions the failure ledger has
// had entries of (redisstore.ParkedSubscriptionsKey), sorted.
func (in *Inspector) ParkedSubscriptions(ctx context.Context) ([]string, error) {
	subs, err := in.client.SMembers(ctx, redisstore.ParkedSubscriptionsKey).Result()
	if err != nil {
		return nil, in.typed(ctx, wrapErr("smembers", redisstore.ParkedSubscriptionsKey, "set", err))
	}
	slices.Sort(subs)
	return subs, nil
}

// positionRange is a compiled FROM..TO.
type positionRange struct {
	hasFrom, hasTo bool
	fromID, toID   broker.StreamID
	fromOff, toOff int64
	idBound        bool // a bound has a sequence part: ids only
}

// parsePositionRange parses FROM..TO (either side may be empty, not
// both): each side a stream id (ms-seq), a bare number (a millisecond
// time for ids, an offset for Kafka), nothing else.
func parsePositionRange(s string) (*positionRange, error) {
	from, to, ok := strings.Cut(s, "..")
	if !ok {
		return nil, errors.New(`want FROM..TO (either side may be left out: "100..", "..200")`)
	}
	if from == "" && to == "" {
		return nil, errors.New("give FROM, TO or both")
	}
	r := &positionRange{hasFrom: from != "", hasTo: to != ""}
	parse := func(side, v string, id *broker.StreamID, off *int64, last bool) error {
		if v == "" {
			return nil
		}
		ms, seq, hasSeq := strings.Cut(v, "-")
		m, err := strconv.ParseUint(ms, 10, 63)
		if err != nil {
			return fmt.Errorf("%s %q is neither an offset nor a stream entry id (ms-seq)", side, v)
		}
		*id, *off = broker.StreamID{Ms: m}, int64(m)
		switch {
		case hasSeq:
			n, err := strconv.ParseUint(seq, 10, 64)
			if err != nil {
				return fmt.Errorf("%s %q is not a stream entry id (ms-seq)", side, v)
			}
			id.Seq = n
			r.idBound = true
		case last:
			id.Seq = math.MaxUint64
		}
		return nil
	}
	if err := parse("FROM", from, &r.fromID, &r.fromOff, false); err != nil {
		return nil, err
	}
	if err := parse("TO", to, &r.toID, &r.toOff, true); err != nil {
		return nil, err
	}
	if r.hasFrom && r.hasTo && r.fromID.Compare(r.toID) > 0 {
		return nil, fmt.Errorf("the range is inverted: FROM %s is after TO %s", from, to)
	}
	return r, nil
}

func (r *positionRange) match(p ledger.Parked) bool {
	if p.Source == source.Kafka {
		off, err := strconv.ParseInt(p.Position, 10, 64)
		return err == nil && (!r.hasFrom || off >= r.fromOff) && (!r.hasTo || off <= r.toOff)
	}
	id, err := broker.ParseStreamID(p.Position)
	return err == nil && (!r.hasFrom || id.Compare(r.fromID) >= 0) && (!r.hasTo || id.Compare(r.toID) <= 0)
}

// compileGlob turns a glob (* ? [..] [!..] \) into an anchored regexp.
func compileGlob(g string) (*regexp.Regexp, error) {
	var b strings.Builder
	b.WriteString(`^(?s:`)
	rs := []rune(g)
	for i := 0; i < len(rs); i++ {
		switch c := rs[i]; c {
		case '*':
			b.WriteString(`.*`)
		case '?':
			b.WriteString(`.`)
		case '\\':
			if i+1 == len(rs) {
				return nil, errors.New(`a glob ends with a lone \`)
			}
			i++
			b.WriteString(regexp.QuoteMeta(string(rs[i])))
		case '[':
			end := -1
			for j := i + 1; j < len(rs); j++ {
				if rs[j] == ']' && j > i+1 && !(j == i+2 && (rs[i+1] == '!' || rs[i+1] == '^')) {
					end = j
					break
				}
			}
			if end < 0 {
				return nil, fmt.Errorf("the class [ at character %d has no closing ]", i+1)
			}
			class := rs[i+1 : end]
			b.WriteByte('[')
			if class[0] == '!' || class[0] == '^' {
				b.WriteByte('^')
				class = class[1:]
			}
			for _, r := range class {
				if r == '\\' || r == '[' || r == ']' || r == '^' {
					b.WriteByte('\\')
				}
				b.WriteRune(r)
			}
			b.WriteByte(']')
			i = end
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteString(`)$`)
	re, err := regexp.Compile(b.String())
	if err != nil {
		return nil, fmt.Errorf("not a glob: %w", err)
	}
	return re, nil
}
