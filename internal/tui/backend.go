package tui

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/present"
	"github.com/protctl/protctl/internal/repair"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/ledger"
)

// Source is what the dashboard reads. The dashboard calls it only from
// tea.Cmds (never from Update or View), at most one call per view at a
// time, so an implementation may block for as long as its backend takes;
// it must return when ctx ends. Implementations must be safe for
// concurrent use by different views.
//
// NewRedisBackend adapts internal/inspect; MemorySource holds snapshots in
// memory (tests, the embedded demo).
type Source interface {
	// Categories names the categories the partitions view lists, in the
	// order shown.
	Categories(ctx context.Context) ([]string, error)
	// Partitions reads category's partitions a page at a time, calling
	// page with each page in order from the calling goroutine; an error
	// from page stops the read and is returned. An unknown category has
	// no pages. The dashboard keeps the pages: a page must not be
	// changed after it was handed over.
	Partitions(ctx context.Context, category string, page func([]inspect.Partition) error) error
	// Explain is `partitions show`: one partition explained. It returns an
	// error wrapping inspect.ErrNotFound for an unknown partition.
	Explain(ctx context.Context, category, key string) (inspect.PartitionDetail, error)
	// Leases lists the leases of the categories' partitions.
	Leases(ctx context.Context) ([]inspect.Lease, error)
	// Parked lists the failure ledger's entries.
	Parked(ctx context.Context) ([]ledger.Parked, error)
	// Nodes lists the live nodes of the services the dashboard watches.
	Nodes(ctx context.Context) ([]runtime.NodeStatus, error)
	// Topics lists the Kafka lease groups' partitions. ErrUnsupported
	// when the backend cannot read them.
	Topics(ctx context.Context) ([]TopicPartition, error)
}

// ServiceLister is an optional capability of a Source: the services whose
// nodes the nodes view lists. A Source that implements it and returns
// none makes the empty nodes view say that a service is needed, instead
// of "No live nodes."
type ServiceLister interface {
	NodeServices() []string
}

// Actions plans and applies repairs: the same internal/repair plans the
// CLI's mutators build. Like Source it is called only from tea.Cmds.
type Actions interface {
	// Plan builds the plan of req (reads only).
	Plan(ctx context.Context, req ActionRequest) (*repair.Plan, error)
	// Apply applies p's allowed items, recording each item's result in p
	// (repair.Repairer.Apply). cmdline is the plan's equivalent command
	// (ActionRequest.CommandLine), which the audit log records.
	Apply(ctx context.Context, p *repair.Plan, cmdline string) (repair.Outcome, error)
}

// ErrUnsupported is returned by a Source or Actions that cannot do what
// was asked (e.g. Topics without a Kafka reader); the view shows it as
// its error line.
var ErrUnsupported = errors.New("tui: not supported by this backend")

// ErrReadOnly is returned by Actions.Plan and Apply of a read-only
// backend; the dashboard disables actions before that in read-only mode.
var ErrReadOnly = errors.New("tui: read-only: actions are disabled")

// Info describes the backend for the header. It is static: the dashboard
// reads it once.
type Info struct {
	Context string // the config context in use; "" for none
	Redis   string // the Redis endpoint, credentials redacted
	Kafka   string // the Kafka brokers; "" when none
	Layout  string // "protean" or "cluster"
}

// TopicPartition is one partition of a Kafka topic's lease group: its
// lease and, per subscription, the checkpoint (next offset to read), the
// partition's head (high watermark) and the lag between them.
type TopicPartition struct {
	Service   string `json:"service"`
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// Owner, Generation and TTLMs are null unless the lease is held.
	Owner         *string             `json:"owner"`
	Generation    *int64              `json:"generation"`
	TTLMs         *int64              `json:"ttlMs"`
	Head          *int64              `json:"head"`
	Subscriptions []TopicSubscription `json:"subscriptions"`
}

// TopicSubscription is a subscription's position on a topic partition.
type TopicSubscription struct {
	Name       string `json:"name"`
	Checkpoint *int64 `json:"checkpoint"` // null when never saved
	Lag        *int64 `json:"lag"`        // null when unknown
}

// ActionRequest is a repair the operator asked for from the dashboard.
// Which fields matter depends on Action (the CLI command in brackets):
//
//	reap         Category, Key, MinIdle       [partitions reap]
//	release      Category, Key, Group, Force  [partitions release]
//	trim         Stream, MaxLen               [streams trim]
//	dead-letter  Category, Key, Group, Reason [partitions skip-head]
//	retry        Subscription, Aggregate, Partition         [parked retry]
//	skip         Subscription, Aggregate, Partition, Reason [parked skip]
//	dlq-replay   Category, Key                [dlq replay --key]
//	dlq-purge    Category, Key                [dlq purge --key]
//	seek         Category, Key, Group, SeekTo [partitions seek]
//	topic-seek   Service, Topic, Partition, Subscription, SeekTo [topics seek]
type ActionRequest struct {
	Action       repair.Action
	Service      string
	Topic        string
	Category     string
	Key          string
	Group        string
	Stream       string
	MaxLen       int64
	MinIdle      time.Duration
	Force        bool
	Subscription string
	Aggregate    string
	// Partition names a Kafka entry's partition (an aggregate can be
	// parked on several; a topic seek's partition), in decimal; "" for
	// Redis entries.
	Partition string
	Reason    string
	// By names the operator in the failure ledger (retry, skip).
	By string
	// SeekTo is a seek's --to: for a partition seek an id, a time,
	// DURATION-ago, earliest or latest; for a topic seek an offset, a
	// time, a DURATION (ago), earliest or latest.
	SeekTo string
}

// CommandLine is the protctl command that builds the same plan, shown in
// the confirm dialog so an operator can script or log what they did.
// context, when set, is added as --context.
func (r ActionRequest) CommandLine(context string) string {
	q := present.ShellQuote
	var args []string
	switch r.Action {
	case repair.ActionReap:
		args = []string{"partitions", "reap", q(r.Category), q(r.Key), "--min-idle", r.MinIdle.String()}
	case repair.ActionRelease:
		args = []string{"partitions", "release", q(r.Category), q(r.Key), "--group", q(r.Group)}
		if r.Force {
			args = append(args, "--force")
		}
	case repair.ActionTrim:
		args = []string{"streams", "trim", q(r.Stream), "--maxlen", strconv.FormatInt(r.MaxLen, 10)}
	case repair.ActionDeadLetter:
		args = []string{"partitions", "skip-head", q(r.Category), q(r.Key), "--group", q(r.Group)}
		if r.Reason != "" {
			args = append(args, "--reason", q(r.Reason))
		}
	case repair.ActionDLQReplay, repair.ActionDLQPurge:
		verb := "replay"
		if r.Action == repair.ActionDLQPurge {
			verb = "purge"
		}
		args = []string{"dlq", verb, q(r.Category), "--key", q(keyGlob(r.Key))}
	case repair.ActionSeek:
		args = []string{"partitions", "seek", q(r.Category), q(r.Key), "--group", q(r.Group), "--to", q(r.SeekTo)}
	case repair.ActionTopicSeek:
		args = []string{"topics", "seek", q(r.Topic), "--service", q(r.Service), "--subscription", q(r.Subscription),
			"--partition", q(r.Partition), "--to", q(r.SeekTo)}
	case repair.ActionRetry:
		args = []string{"parked", "retry", q(r.Subscription), q(r.Aggregate)}
		if r.Partition != "" {
			args = append(args, "--partition", q(r.Partition))
		}
	case repair.ActionSkip:
		args = []string{"parked", "skip", q(r.Subscription), q(r.Aggregate)}
		if r.Partition != "" {
			args = append(args, "--partition", q(r.Partition))
		}
		args = append(args, "--reason", q(r.Reason))
	default:
		return "protctl ?"
	}
	if context != "" {
		args = append(args, "--context", q(context))
	}
	return "protctl " + strings.Join(args, " ")
}

// Validate reports a request missing what its action needs.
func (r ActionRequest) Validate() error {
	need := func(name, v string) error {
		if v == "" {
			return fmt.Errorf("tui: %s needs %s", r.Action, name)
		}
		return nil
	}
	switch r.Action {
	case repair.ActionReap:
		return errors.Join(need("a category", r.Category), need("a key", r.Key))
	case repair.ActionRelease:
		return errors.Join(need("a key", r.Key), need("a group", r.Group))
	case repair.ActionDeadLetter:
		return errors.Join(need("a category", r.Category), need("a key", r.Key), need("a group", r.Group))
	case repair.ActionDLQReplay, repair.ActionDLQPurge:
		return errors.Join(need("a category", r.Category), need("a key", r.Key))
	case repair.ActionTrim:
		if r.MaxLen <= 0 {
			return fmt.Errorf("tui: trim needs a positive maxlen")
		}
		return need("a stream", r.Stream)
	case repair.ActionSeek:
		return errors.Join(need("a category", r.Category), need("a key", r.Key), need("a group", r.Group), need("a target", r.SeekTo))
	case repair.ActionTopicSeek:
		err := errors.Join(need("a service", r.Service), need("a topic", r.Topic), need("a subscription", r.Subscription),
			need("a partition", r.Partition), need("a target", r.SeekTo))
		if _, perr := r.topicPartition(); err == nil && perr != nil {
			err = perr
		}
		return err
	case repair.ActionRetry:
		return errors.Join(need("a subscription", r.Subscription), need("an aggregate", r.Aggregate))
	case repair.ActionSkip:
		return errors.Join(need("a subscription", r.Subscription), need("an aggregate", r.Aggregate), need("a reason", r.Reason))
	}
	return fmt.Errorf("tui: unknown action %q", r.Action)
}

// topicPartition is Partition as a Kafka partition number.
func (r ActionRequest) topicPartition() (int32, error) {
	n, err := strconv.ParseInt(r.Partition, 10, 32)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("tui: %s needs a partition number, not %q", r.Action, r.Partition)
	}
	return int32(n), nil
}

// keyGlob is the --key glob that matches key alone: the glob's
// metacharacters in it escaped.
func keyGlob(key string) string {
	var b strings.Builder
	for _, r := range key {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
