package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/repair"
	"github.com/protctl/protctl/pkg/broker"
)

// DefaultMaxLen is the stream's approximate cap (XADD MAXLEN ~): at a few
// KB an entry, about ten thousand repairs fit in tens of MB, which is
// months of operator work on a busy deployment, while a runaway script
// cannot grow the key without bound.
const DefaultMaxLen = 10000

// DefaultMaxItems is how many items an entry carries in full. A reap
// --all-cold over a large index can plan thousands of items; the entry
// keeps the first DefaultMaxItems and counts the rest (the summary counts
// them all), so one apply cannot make an entry of many megabytes.
const DefaultMaxItems = 1000

// Recorder appends an Entry to the audit stream for every apply it is
// told of. It implements repair.Recorder; install it with
// repair.WithRecorder. It is safe for concurrent use.
type Recorder struct {
	client redis.UniversalClient
	origin Origin
	cfg    recorderConfig
}

type recorderConfig struct {
	key      string
	maxLen   int64
	maxItems int
}

// RecorderOption configures NewRecorder.
type RecorderOption func(*recorderConfig)

// WithKey names the stream. Default Key.
func WithKey(key string) RecorderOption { return func(c *recorderConfig) { c.key = key } }

// WithMaxLen caps the stream at about n entries (XADD MAXLEN ~ n; Redis
// trims whole macro nodes, so a few more may stay). Default
// DefaultMaxLen; n <= 0 is the default.
func WithMaxLen(n int64) RecorderOption { return func(c *recorderConfig) { c.maxLen = n } }

// WithMaxItems bounds the items an entry carries in full. Default
// DefaultMaxItems; n <= 0 is the default.
func WithMaxItems(n int) RecorderOption { return func(c *recorderConfig) { c.maxItems = n } }

func (c *recorderConfig) validate() {
	if c.key == "" {
		c.key = Key
	}
	if c.maxLen <= 0 {
		c.maxLen = DefaultMaxLen
	}
	if c.maxItems <= 0 {
		c.maxItems = DefaultMaxItems
	}
}

// NewRecorder returns a Recorder that appends entries of origin's applies
// to client's audit stream. It does no I/O.
func NewRecorder(client redis.UniversalClient, origin Origin, opts ...RecorderOption) *Recorder {
	var cfg recorderConfig
	for _, o := range opts {
		o(&cfg)
	}
	cfg.validate()
	return &Recorder{client: client, origin: origin, cfg: cfg}
}

// RecordApply appends the entry of a (repair.Recorder). Errors are
// returned wrapped with "audit: " and the stream's name; nothing is
// retried, since a retry after an ambiguous failure could record the
// apply twice.
func (r *Recorder) RecordApply(ctx context.Context, a repair.Applied) error {
	_, err := r.Append(ctx, newEntry(r.origin, a, r.cfg.maxItems))
	return err
}

// CheckRecord fails with a *broker.WrongTypeError when the stream's key
// holds another Redis type, so that repair.Apply refuses a plan it could
// not record before changing anything (repair.RecordChecker). A missing
// key is fine: XADD creates it. It only reads (TYPE).
func (r *Recorder) CheckRecord(ctx context.Context) error {
	t, err := r.client.Type(ctx, r.cfg.key).Result()
	if err != nil {
		return fmt.Errorf("audit: checking %s: %w", r.cfg.key, err)
	}
	if t != "none" && t != "stream" {
		return &broker.WrongTypeError{Op: "record the apply in the audit log", Key: r.cfg.key, Want: "stream", Got: t}
	}
	return nil
}

var _ repair.RecordChecker = (*Recorder)(nil)

// RecordStart appends the entry of a bulk apply of a resumable plan that
// is about to try its items (repair.StartRecorder): outcome "started"
// (OutcomeStarted), the plan's items without results, time = startedAt.
// The apply's own entry follows when it ends; one that is killed leaves
// only this one, and the entry of the apply that resumes it has the
// same planId.
func (r *Recorder) RecordStart(ctx context.Context, a repair.Applied) error {
	e := newEntry(r.origin, a, r.cfg.maxItems)
	e.Time, e.Outcome, e.ExitCode = a.StartedAt.UTC(), OutcomeStarted, 0
	e.Summary = startSummary(a.Plan)
	_, err := r.Append(ctx, e)
	return err
}

func startSummary(p *repair.Plan) string {
	n := 0
	for _, it := range p.Items {
		if it.Allowed && it.Result != repair.ResultSkipped {
			n++
		}
	}
	return fmt.Sprintf("%d to apply", n)
}

// Append adds e to the stream and returns its id. e.ID and e.Invalid are
// not stored.
func (r *Recorder) Append(ctx context.Context, e Entry) (string, error) {
	e.ID, e.Invalid = "", ""
	doc, err := json.Marshal(e)
	if err != nil {
		return "", fmt.Errorf("audit: encoding the entry: %w", err)
	}
	id, err := r.client.XAdd(ctx, &redis.XAddArgs{
		Stream: r.cfg.key,
		MaxLen: r.cfg.maxLen,
		Approx: true,
		Values: []any{
			"time", e.Time.UTC().Format(time.RFC3339Nano),
			"user", e.User,
			"host", e.Host,
			"context", e.Context,
			"outcome", e.Outcome,
			"actions", strings.Join(e.Actions, ","),
			"entry", string(doc),
		},
	}).Result()
	if err != nil {
		return "", fmt.Errorf("audit: appending to %s: %w", r.cfg.key, err)
	}
	return id, nil
}
