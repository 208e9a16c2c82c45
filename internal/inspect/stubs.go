package inspect

import (
	"context"
	"errors"
	"time"
)

var errTODO = errors.New("inspect: not implemented yet")

func (in *Inspector) eachPartition(ctx context.Context, category string, opts PartitionOptions, fn func(Partition) error) error {
	return errTODO
}
func (in *Inspector) explain(ctx context.Context, category, key string, opts ExplainOptions) (PartitionDetail, error) {
	return PartitionDetail{}, errTODO
}
func (in *Inspector) categories(ctx context.Context, opts ScanOptions) ([]Category, error) {
	return nil, errTODO
}
func (in *Inspector) categoryInfo(ctx context.Context, category string) (Category, error) {
	return Category{}, errTODO
}
func (in *Inspector) leases(ctx context.Context, q LeaseQuery) ([]Lease, error) { return nil, errTODO }
func (in *Inspector) lease(ctx context.Context, group, key string) (Lease, error) {
	return Lease{}, errTODO
}
func (in *Inspector) trimInfo(ctx context.Context, stream string, maxLen int64) (TrimInfo, error) {
	return TrimInfo{}, errTODO
}
func (in *Inspector) fsck(ctx context.Context, category string, opts ScanOptions) (FsckReport, error) {
	return FsckReport{}, errTODO
}
func (in *Inspector) readEntry(ctx context.Context, stream, id string) (Entry, error) {
	return Entry{}, errTODO
}
func (in *Inspector) serverTime(ctx context.Context) (time.Time, error) { return time.Time{}, errTODO }
