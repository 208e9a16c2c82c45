package runtime

import (
	"context"
	"time"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime/placement"
	"github.com/protctl/protctl/pkg/runtime/source"
)

// HeldPartition is one partition a node holds, in its status record.
type HeldPartition struct {
	Subscription string      `json:"subscription"`
	Source       source.Kind `json:"source"`
	Category     string      `json:"category,omitempty"`
	Topic        string      `json:"topic,omitempty"`
	Partition    string      `json:"partition"` // Redis key or Kafka partition number
	Generation   int64       `json:"generation"`
}

// JoinState is where a node (or a topic subscription) is in its life.
type JoinState string

const (
	JoinJoining JoinState = "joining"
	JoinJoined  JoinState = "joined"
	JoinLeaving JoinState = "leaving"
	JoinLeft    JoinState = "left"
	JoinFailed  JoinState = "failed"
)

// NodeStatus is the record a node heartbeats, read by `protctl nodes ls`
// and the dashboard. Membership (who is live) is derived from it.
type NodeStatus struct {
	Service   string          `json:"service"`
	Node      string          `json:"node"`
	AdminAddr string          `json:"adminAddr,omitempty"`
	JoinState JoinState       `json:"joinState"`
	StartedAt time.Time       `json:"startedAt"`
	LastSeen  time.Time       `json:"lastSeen"`
	Held      []HeldPartition `json:"held"`
	Paused    []string        `json:"paused"`
	// OperatorPaused are "subscription/partition" held by an operator's
	// pause (`protctl pause`); Paused is the runtime backing off on its
	// own. docs/decisions/0045-pause.md.
	OperatorPaused []string         `json:"operatorPaused,omitempty"`
	Throttled      []string         `json:"throttled"`
	Parked         int              `json:"parked"`
	Counters       map[string]int64 `json:"counters,omitempty"` // processed, failed, parked, ...
	// Mode is the operator mode (cordoned, draining) the node has read
	// and acts on; "" or active for none (docs/decisions/0046).
	Mode placement.Mode `json:"mode,omitempty"`
}

// Membership tracks a service's live nodes.
type Membership interface {
	// Heartbeat records st as live for ttl (it is also the status record).
	Heartbeat(ctx context.Context, st NodeStatus, ttl time.Duration) error
	// Members returns the live nodes of service, sorted by node id.
	Members(ctx context.Context, service string) ([]NodeStatus, error)
	// Leave removes node at once (graceful stop), so others need not wait
	// for its heartbeat to expire.
	Leave(ctx context.Context, service, node string) error
}

// Checkpoints stores, per (lease group, subscription, partition), the next
// offset to read. Saves are fenced by the partition's lease.
type Checkpoints interface {
	// Save stores next, refusing a stale fence with broker.ErrLeaseLost.
	// A checkpoint never moves backwards: a lower next is ignored.
	Save(ctx context.Context, f broker.Fence, leaseGroup, subscription string, partition int32, next int64) error
	// Load returns the checkpoint, ok=false when none was saved.
	Load(ctx context.Context, leaseGroup, subscription string, partition int32) (next int64, ok bool, err error)
	// LoadAll returns every partition's checkpoint of a subscription.
	LoadAll(ctx context.Context, leaseGroup, subscription string) (map[int32]int64, error)
	// LeaseKeys names the lease and the fence counter of partition in
	// leaseGroup, as the store lays them out: the leases that fence Save
	// (and the ledger's writes) live where the store can prove them in
	// the same atomic step (on a Redis Cluster, in the checkpoints' slot).
	// The topic engine acquires and renews its leases at these keys, so
	// a program never names them itself. It does no I/O.
	LeaseKeys(leaseGroup string, partition int32) (lease, generation string)
}
