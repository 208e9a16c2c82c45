package tui

import (
	"testing"

	"github.com/protctl/protctl/internal/inspect"
)

// TestPartitionRowsShowTheStatus: the STATUS column is the status word
// of the group's health (the same as partitions ls), "-" when unread.
func TestPartitionRowsShowTheStatus(t *testing.T) {
	lag := int64(3)
	parts := []inspect.Partition{{Category: "c", Key: "k", Groups: []inspect.Group{
		{Name: "halted", Lag: &lag, Health: &inspect.Health{Status: inspect.StatusHalted}},
		{Name: "unread", Lag: &lag},
	}}}
	rows := partitionRows(parts, 0)
	col := len(viewDefs[viewPartitions].cols) - 1
	if viewDefs[viewPartitions].cols[col].title != "STATUS" {
		t.Fatalf("last column %q", viewDefs[viewPartitions].cols[col].title)
	}
	if got := rows[0].cells[col]; got != "HALTED" {
		t.Errorf("halted row: %q", got)
	}
	if got := rows[1].cells[col]; got != "-" {
		t.Errorf("unread row: %q", got)
	}
}
