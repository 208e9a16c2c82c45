package storecontract

import (
	"strconv"
	"strings"
	"time"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/ledger"
)

// Invalid is the error of a bad argument arg of op: value as it should
// be quoted in the message, and why it is refused.
func Invalid(op, arg, value, reason string) error {
	return &broker.InvalidArgumentError{Op: op, Arg: arg, Value: value, Reason: reason}
}

// NonEmpty refuses an empty v.
func NonEmpty(op, arg, v string) error {
	if v == "" {
		return Invalid(op, arg, `""`, "must not be empty")
	}
	return nil
}

// Tagged checks a name that redisstore puts inside a hash tag: a brace
// would move the tag and split a call's keys over Cluster slots.
func Tagged(op, arg, v string) error {
	if err := NonEmpty(op, arg, v); err != nil {
		return err
	}
	if strings.ContainsAny(v, "{}") {
		return Invalid(op, arg, strconv.Quote(v), `must not contain "{" or "}"`)
	}
	return nil
}

// Service checks a service name (a hash tag of its members' keys).
func Service(op, service string) error { return Tagged(op, "service", service) }

// Subscription refuses the empty name and the reserved form __x__
// (redisstore's ParkedSubscriptionsKey would otherwise be some
// subscription's index).
func Subscription(op, sub string) error {
	if err := NonEmpty(op, "subscription", sub); err != nil {
		return err
	}
	if len(sub) >= 4 && strings.HasPrefix(sub, "__") && strings.HasSuffix(sub, "__") {
		return Invalid(op, "subscription", strconv.Quote(sub), "the form __x__ is reserved")
	}
	return nil
}

// Fence refuses a fence without a lease key or a token.
func Fence(op string, f broker.Fence) error {
	if err := NonEmpty(op, "lease key", f.LeaseKey); err != nil {
		return err
	}
	return NonEmpty(op, "fence token", f.Token)
}

// Status refuses a status other than parked, retrying and unrecoverable.
func Status(op string, s ledger.Status) error {
	switch s {
	case ledger.StatusParked, ledger.StatusRetrying, ledger.StatusUnrecoverable:
		return nil
	}
	return Invalid(op, "status", strconv.Quote(string(s)), `want "parked", "retrying" or "unrecoverable"`)
}

// Heartbeat checks Membership.Heartbeat's arguments.
func Heartbeat(op string, st runtime.NodeStatus, ttl time.Duration) error {
	if err := Node(op, st.Service, st.Node); err != nil {
		return err
	}
	if ttl <= 0 {
		return Invalid(op, "ttl", ttl.String(), "must be positive")
	}
	return nil
}

// Node checks a node of a service (Membership.Leave; Heartbeat's status).
func Node(op, service, node string) error {
	if err := Service(op, service); err != nil {
		return err
	}
	return NonEmpty(op, "node", node)
}

// Checkpoint checks the checkpoint a Checkpoints call names (Load;
// LoadAll with partition 0).
func Checkpoint(op, leaseGroup, subscription string, partition int32) error {
	if err := Tagged(op, "lease group", leaseGroup); err != nil {
		return err
	}
	if err := NonEmpty(op, "subscription", subscription); err != nil {
		return err
	}
	if partition < 0 {
		return Invalid(op, "partition", strconv.FormatInt(int64(partition), 10), "must not be negative")
	}
	return nil
}

// Save checks Checkpoints.Save's arguments.
func Save(op string, f broker.Fence, leaseGroup, subscription string, partition int32, next int64) error {
	if err := Fence(op, f); err != nil {
		return err
	}
	if err := Checkpoint(op, leaseGroup, subscription, partition); err != nil {
		return err
	}
	if next < 0 {
		return Invalid(op, "next offset", strconv.FormatInt(next, 10), "must not be negative")
	}
	return nil
}

// Entry checks a fenced Ledger call's entry (Resolve).
func Entry(op string, f broker.Fence, subscription, aggregate string) error {
	if err := Fence(op, f); err != nil {
		return err
	}
	return Aggregate(op, subscription, aggregate)
}

// Park checks Ledger.Park's arguments; an empty p.Status means parked.
func Park(op string, f broker.Fence, p ledger.Parked) error {
	if err := Entry(op, f, p.Subscription, p.Aggregate); err != nil {
		return err
	}
	if p.Status == "" {
		return nil
	}
	return Status(op, p.Status)
}

// SetStatus checks Ledger.SetStatus's arguments.
func SetStatus(op string, f broker.Fence, subscription, aggregate string, status ledger.Status) error {
	if err := Entry(op, f, subscription, aggregate); err != nil {
		return err
	}
	return Status(op, status)
}

// Aggregate checks the aggregate of a subscription an unfenced Ledger
// call names (GetParked, RequestRetry, RequestSkip).
func Aggregate(op, subscription, aggregate string) error {
	if err := Subscription(op, subscription); err != nil {
		return err
	}
	return NonEmpty(op, "aggregate", aggregate)
}

// Pinned checks ledger.PinnedRequester.RequestPinned's request: the entry,
// the action, a reason for a skip, a known pinned status, and a token of
// 1 to 64 of [A-Za-z0-9._-] (stores put it in key names).
func Pinned(op string, r ledger.PinnedRequest) error {
	if err := Aggregate(op, r.Subscription, r.Aggregate); err != nil {
		return err
	}
	switch r.Action {
	case ledger.ActionRetry:
	case ledger.ActionSkip:
		if r.Reason == "" {
			return Invalid(op, "reason", `""`, "a skip needs a reason")
		}
	default:
		return Invalid(op, "action", strconv.Quote(string(r.Action)), `want "retry" or "skip"`)
	}
	if err := Status(op, r.Pin.Status); err != nil {
		return err
	}
	if r.Pin.Request != "" && r.Pin.Request != ledger.ActionRetry && r.Pin.Request != ledger.ActionSkip {
		return Invalid(op, "pinned request", strconv.Quote(string(r.Pin.Request)), `want "", "retry" or "skip"`)
	}
	if r.Token == "" || len(r.Token) > 64 || strings.IndexFunc(r.Token, badTokenRune) >= 0 {
		return Invalid(op, "token", strconv.Quote(r.Token), "want 1 to 64 of A-Z a-z 0-9 . _ -")
	}
	return nil
}

func badTokenRune(c rune) bool {
	return !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-')
}

// LeaseKeys are the keys of partition's lease and fence counter in
// leaseGroup ("service|name"): "protctl:{service|name}:lease:<p>" and
// ":generation:<p>", the layout both stores use (redisstore/keys.go,
// docs/architecture.md "The runtime's keys").
func LeaseKeys(leaseGroup string, partition int32) (lease, generation string) {
	base := "protctl:{" + leaseGroup + "}:"
	p := strconv.FormatInt(int64(partition), 10)
	return base + "lease:" + p, base + "generation:" + p
}
