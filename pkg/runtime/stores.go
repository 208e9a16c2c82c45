package runtime

import (
	"context"
	"encoding/json"
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
	// BackingOff are "subscription/partition" the runtime holds back after
	// a systemic failure, retrying on its own with a growing wait.
	BackingOff []string `json:"backingOff"`
	// Paused are "subscription/partition" (a Kafka topic's:
	// "subscription/aggregate") held by an operator's pause
	// (`protctl pause`) until `protctl resume`. The two words never mix
	// (docs/decisions/0045-pause.md, point 8).
	Paused    []string         `json:"paused"`
	Throttled []string         `json:"throttled"`
	Parked    int              `json:"parked"`
	Counters  map[string]int64 `json:"counters,omitempty"` // processed, failed, parked, ...
	// Mode is the operator mode (cordoned, draining) the node has read
	// and acts on; "" or active for none (docs/decisions/0046).
	Mode placement.Mode `json:"mode,omitempty"`
}

// UnmarshalJSON reads a status record, also one heartbeated by a node of
// a release before the words were split (issue 23): such a record has no
// "backingOff"; its "paused" was the back-off and its "operatorPaused"
// the operator's pause. Reading it in the new words keeps `nodes ls` and
// `check --no-backing-off` right during a rolling upgrade, until the old
// node's record expires with its last heartbeat.
func (st *NodeStatus) UnmarshalJSON(data []byte) error {
	type record NodeStatus // no methods: no recursion
	var r struct {
		record
		// BackingOff shadows record's: its presence tells the releases
		// apart (a current record has the key, even as null: a status
		// marshalled without EncodeStatus's empty lists).
		BackingOff     json.RawMessage `json:"backingOff"`
		OperatorPaused []string        `json:"operatorPaused"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return err
	}
	*st = NodeStatus(r.record)
	if r.BackingOff != nil {
		if err := json.Unmarshal(r.BackingOff, &st.BackingOff); err != nil {
			return err
		}
	} else {
		st.BackingOff, st.Paused = st.Paused, r.OperatorPaused
		if st.Paused == nil {
			st.Paused = []string{}
		}
	}
	return nil
}

// Membership tracks a service's live nodes.
type Membership interface {
	// Heartbeat records st as live for ttl (it is also the status record).
	Heartbeat(ctx context.Context, st NodeStatus, ttl time.Duration) error
	// Members returns the live nodes of service, sorted by node id, with
	// their whole status records, held partitions included: what an
	// operator's tools read.
	Members(ctx context.Context, service string) ([]NodeStatus, error)
	// Live is Members without the held partitions (Held is nil): what
	// every node reads each heartbeat, so its cost does not grow with the
	// partitions the nodes hold (docs/decisions/0051).
	Live(ctx context.Context, service string) ([]NodeStatus, error)
	// Held returns the partitions each of nodes holds, as its latest
	// heartbeat stored them; a node without a live status record is left
	// out. A node reads them only for the nodes it must place around (a
	// cordoned node keeps what it holds).
	Held(ctx context.Context, service string, nodes []string) (map[string][]HeldPartition, error)
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
