// Package storetest is the behaviour suite of the runtime's stores
// (ledger.Ledger, runtime.Membership, runtime.Checkpoints): every
// implementation runs the same cases, so that the in-memory store used by
// the demo and by fast tests cannot drift from the Redis one.
//
//	storetest.Run(t, func(t *testing.T) storetest.Target { ... })
//
// The suite lives beside memstore only because the stores' packages are
// where it was written; it depends on nothing but pkg/runtime and
// pkg/broker, and belongs beside the interfaces (pkg/runtime/storetest).
package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/ledger"
)

// Store is what the suite exercises: the three stores in one value.
type Store interface {
	ledger.Ledger
	runtime.Membership
	runtime.Checkpoints
}

// Target is one empty store and the hooks the cases need.
type Target struct {
	Store Store
	// SetLease makes the lease key hold value (no TTL), as an acquire or a
	// takeover by a newer generation would.
	SetLease func(t *testing.T, key, value string)
	// DropLease removes the lease key, as an expiry or a release would.
	DropLease func(t *testing.T, key string)
	// Advance lets d pass on the clock the store measures TTLs on: a fake
	// clock's Advance, or a real wait for a server's clock.
	Advance func(d time.Duration)
	// RequestSeek and WithdrawSeek are the operator's side of a seek of
	// partition of subscription in lease group "shop|topic:orders" (the
	// stores' RequestSeek and WithdrawSeek, TTL one minute): required when
	// Store is a runtime.CheckpointSeeker.
	RequestSeek  func(t *testing.T, subscription string, partition int32, req runtime.SeekRequest) string
	WithdrawSeek func(t *testing.T, subscription string, partition int32, id string) bool
}

// Factory returns a fresh Target for each case.
type Factory func(t *testing.T) Target

// Case is one named behaviour check.
type Case struct {
	Name string
	Run  func(t *testing.T, s *Suite)
}

// Suite is what a case works with.
type Suite struct {
	Target
	Ctx context.Context
}

// Cases returns every case, in the order Run runs them.
func Cases() []Case {
	var all []Case
	for _, group := range [][]Case{membershipCases, checkpointCases, seekCases, ledgerCases, requestCases, pinnedCases, inputCases, raceCases} {
		all = append(all, group...)
	}
	return all
}

// Run runs every case against a fresh Target from newTarget.
func Run(t *testing.T, newTarget Factory) {
	t.Helper()
	for _, c := range Cases() {
		t.Run(c.Name, func(t *testing.T) {
			target := newTarget(t)
			if target.Store == nil || target.SetLease == nil || target.DropLease == nil || target.Advance == nil {
				t.Fatal("storetest: Target needs Store, SetLease, DropLease and Advance")
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			c.Run(t, &Suite{Target: target, Ctx: ctx})
		})
	}
}

// Names the cases use. The lease keys have the cluster layouts' hash
// tags, as the runtime's leases do.
const (
	service    = "shop"
	leaseGroup = "shop|topic:orders"
	lease0     = "protctl:{shop|topic:orders}:lease:0"
	lease1     = "protctl:{shop|topic:orders}:lease:1"
	redisLease = "app.handlers.Projector:{o-1}:__lease__"
	sub        = "ledger-sync"
	sub2       = "audit"
	tokenA     = "node-a:1"
	tokenB     = "node-b:2"
	long       = time.Minute
	// wait bounds every wait for a signal.
	wait = 5 * time.Second
)

var t0 = time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)

func wantErrIs(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: got error %v, want %v", what, err, target)
	}
}

func must(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
