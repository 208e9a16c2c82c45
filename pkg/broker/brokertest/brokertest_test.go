package brokertest_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/brokertest"
	"github.com/protctl/protctl/pkg/broker/memorybroker"
)

// skipsLeaseCheck is a broken adapter: when a fenced call's token is
// stale, it quietly acts as whoever holds the lease now, which is exactly
// the bug fencing exists to prevent (a paused owner acking a newer
// owner's work).
type skipsLeaseCheck struct {
	broker.PartitionedBroker
	faults brokertest.Faults
}

func (b skipsLeaseCheck) current(ctx context.Context, f broker.Fence) broker.Fence {
	if v, ok, _ := b.faults.GetString(ctx, f.LeaseKey); ok {
		f.Token = v
	}
	return f
}

func (b skipsLeaseCheck) ReadPartitionFenced(ctx context.Context, f broker.Fence, stream, group string, count int64, mode broker.ReadMode) ([]broker.Message, error) {
	msgs, err := b.PartitionedBroker.ReadPartitionFenced(ctx, f, stream, group, count, mode)
	if errors.Is(err, broker.ErrLeaseLost) {
		return b.PartitionedBroker.ReadPartitionFenced(ctx, b.current(ctx, f), stream, group, count, mode)
	}
	return msgs, err
}

func (b skipsLeaseCheck) AckPartitionFenced(ctx context.Context, f broker.Fence, stream, group string, ids ...string) (int64, error) {
	n, err := b.PartitionedBroker.AckPartitionFenced(ctx, f, stream, group, ids...)
	if errors.Is(err, broker.ErrLeaseLost) {
		return b.PartitionedBroker.AckPartitionFenced(ctx, b.current(ctx, f), stream, group, ids...)
	}
	return n, err
}

func brokenTarget(t *testing.T) brokertest.Target {
	clock := memorybroker.NewManualClock(time.Unix(1_700_000_000, 0))
	b := memorybroker.New(memorybroker.WithClock(clock))
	return brokertest.Target{
		Broker:  skipsLeaseCheck{PartitionedBroker: b, faults: b.Faults()},
		Advance: clock.Advance,
		Faults:  b.Faults(),
	}
}

// The suite must be able to fail: run it on the broken adapter in a child
// process (a failing subtest cannot be contained in this one) and require
// that it fails, on the fencing cases.
func TestSuiteFailsAnAdapterThatSkipsTheLeaseCheck(t *testing.T) {
	if os.Getenv("BROKERTEST_RUN_BROKEN") == "1" {
		brokertest.Run(t, brokenTarget)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSuiteFailsAnAdapterThatSkipsTheLeaseCheck$", "-test.v")
	cmd.Env = append(os.Environ(), "BROKERTEST_RUN_BROKEN=1")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("the suite passed an adapter that skips the lease check (err %v):\n%s", err, out)
	}
	for _, name := range []string{
		"StaleOwnerCannotReadAckReclaimOrDeadLetter",
		"StaleAckLeavesEntriesPending",
	} {
		if !strings.Contains(string(out), "--- FAIL: TestSuiteFailsAnAdapterThatSkipsTheLeaseCheck/"+name) {
			t.Errorf("case %s did not catch the broken adapter; output:\n%s", name, out)
		}
	}
}

func TestSuiteHasAtLeastThirtyCases(t *testing.T) {
	names := map[string]bool{}
	for _, c := range brokertest.Cases() {
		if names[c.Name] {
			t.Fatalf("duplicate case name %s", c.Name)
		}
		names[c.Name] = true
	}
	if len(names) < 30 {
		t.Fatalf("the suite has %d cases, want at least 30", len(names))
	}
}
