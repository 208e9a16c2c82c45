package tui

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/ledger"
)

// MemorySource is a Source over snapshots held in memory: tests set them,
// and the embedded demo (which has no Redis to inspect) publishes what its
// in-memory broker and nodes hold. Safe for concurrent use; the setters
// may be called while the dashboard runs, and the next refresh shows the
// new snapshot.
type MemorySource struct {
	mu         sync.Mutex
	partitions map[string][]inspect.Partition
	categories []string
	details    map[string]inspect.PartitionDetail
	leases     []inspect.Lease
	parked     []ledger.Parked
	nodes      []runtime.NodeStatus
	topics     []TopicPartition
	pageSize   int
	err        error
}

var _ Source = (*MemorySource)(nil)

// NewMemorySource returns an empty source handing out pages of pageSize
// partitions (non-positive means 1000).
func NewMemorySource(pageSize int) *MemorySource {
	if pageSize <= 0 {
		pageSize = 1000
	}
	return &MemorySource{partitions: map[string][]inspect.Partition{}, details: map[string]inspect.PartitionDetail{}, pageSize: pageSize}
}

// SetPartitions replaces category's partitions (the category is added to
// the list in first-set order).
func (m *MemorySource) SetPartitions(category string, parts []inspect.Partition) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.partitions[category]; !ok {
		m.categories = append(m.categories, category)
	}
	m.partitions[category] = slices.Clone(parts)
}

// SetDetail sets what Explain returns for (d.Category, d.Key).
func (m *MemorySource) SetDetail(d inspect.PartitionDetail) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.details[d.Category+"\x00"+d.Key] = d
}

// SetLeases replaces the leases.
func (m *MemorySource) SetLeases(l []inspect.Lease) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.leases = slices.Clone(l)
}

// SetParked replaces the ledger entries.
func (m *MemorySource) SetParked(p []ledger.Parked) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.parked = slices.Clone(p)
}

// SetNodes replaces the live nodes.
func (m *MemorySource) SetNodes(n []runtime.NodeStatus) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.nodes = slices.Clone(n)
}

// SetTopics replaces the topic partitions.
func (m *MemorySource) SetTopics(t []TopicPartition) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.topics = slices.Clone(t)
}

// SetErr makes every call fail with err (nil heals the source), as an
// unreachable backend would.
func (m *MemorySource) SetErr(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.err = err
}

// Categories lists the categories in first-set order.
func (m *MemorySource) Categories(context.Context) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.categories), m.err
}

// Partitions hands out category's partitions in pages.
func (m *MemorySource) Partitions(ctx context.Context, category string, page func([]inspect.Partition) error) error {
	m.mu.Lock()
	parts, err, size := m.partitions[category], m.err, m.pageSize
	m.mu.Unlock()
	if err != nil {
		return err
	}
	for start := 0; start < len(parts); start += size {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := page(parts[start:min(start+size, len(parts))]); err != nil {
			return err
		}
	}
	return nil
}

// Explain returns the detail set with SetDetail, or one built from the
// partition's summary when none was set.
func (m *MemorySource) Explain(_ context.Context, category, key string) (inspect.PartitionDetail, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		return inspect.PartitionDetail{}, m.err
	}
	if d, ok := m.details[category+"\x00"+key]; ok {
		return d, nil
	}
	for _, p := range m.partitions[category] {
		if p.Key != key {
			continue
		}
		d := inspect.PartitionDetail{
			Category: p.Category, Key: p.Key, Stream: p.Stream, Length: p.Length,
			LastEntryID: p.LastEntryID, IdleMs: p.IdleMs, Lanes: p.Lanes, Indexed: true,
		}
		for _, g := range p.Groups {
			d.Groups = append(d.Groups, inspect.GroupDetail{Group: g})
		}
		return d, nil
	}
	return inspect.PartitionDetail{}, fmt.Errorf("%w: partition %s of %s", inspect.ErrNotFound, key, category)
}

// Leases returns the leases.
func (m *MemorySource) Leases(context.Context) ([]inspect.Lease, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.leases), m.err
}

// Parked returns the ledger entries.
func (m *MemorySource) Parked(context.Context) ([]ledger.Parked, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.parked), m.err
}

// Nodes returns the live nodes.
func (m *MemorySource) Nodes(context.Context) ([]runtime.NodeStatus, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.nodes), m.err
}

// Topics returns the topic partitions.
func (m *MemorySource) Topics(context.Context) ([]TopicPartition, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.topics), m.err
}
