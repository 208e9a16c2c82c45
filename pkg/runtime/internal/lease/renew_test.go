package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime/internal/lease"
)

// renewer answers each fence's token from held; a token in fail errors.
type renewer struct {
	held  map[string]bool
	fail  map[string]error
	calls int
}

func (r *renewer) RenewPartitionLease(_ context.Context, f broker.Fence, _ time.Duration) (bool, error) {
	r.calls++
	if err := r.fail[f.Token]; err != nil {
		return false, err
	}
	return r.held[f.Token], nil
}

type batch struct {
	ok  []bool
	err error
}

func (b batch) RenewPartitionLeases(context.Context, []broker.Fence, time.Duration) ([]bool, error) {
	return b.ok, b.err
}

func fences(tokens ...string) []broker.Fence {
	fs := make([]broker.Fence, len(tokens))
	for i, t := range tokens {
		fs[i] = broker.Fence{LeaseKey: "k" + t, Token: t}
	}
	return fs
}

func TestRenewAllOneByOne(t *testing.T) {
	boom := errors.New("boom")
	r := &renewer{held: map[string]bool{"a": true}, fail: map[string]error{"c": boom, "d": errors.New("later")}}
	res, err := lease.RenewAll(t.Context(), r, nil, fences("a", "b", "c", "d"), time.Second)
	if !errors.Is(err, boom) {
		t.Errorf("err %v, want the first failure", err)
	}
	if diff := cmp.Diff([]lease.Result{lease.Renewed, lease.Refused, lease.Unknown, lease.Unknown}, res); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
	if r.calls != 4 {
		t.Errorf("%d calls, want one per lease", r.calls)
	}
}

func TestRenewAllBatch(t *testing.T) {
	r := &renewer{}
	res, err := lease.RenewAll(t.Context(), r, batch{ok: []bool{false, true}}, fences("a", "b"), time.Second)
	if err != nil || r.calls != 0 {
		t.Fatalf("err %v, %d single calls", err, r.calls)
	}
	if diff := cmp.Diff([]lease.Result{lease.Refused, lease.Renewed}, res); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
	// A batch that answers for the wrong number of leases, or fails,
	// tells nothing about any of them.
	for _, b := range []batch{{ok: []bool{true}}, {err: errors.New("down")}} {
		res, err := lease.RenewAll(t.Context(), r, b, fences("a", "b"), time.Second)
		if err == nil {
			t.Errorf("batch %+v: no error", b)
		}
		if diff := cmp.Diff([]lease.Result{lease.Unknown, lease.Unknown}, res); diff != "" {
			t.Errorf("batch %+v: results (-want +got):\n%s", b, diff)
		}
	}
}
