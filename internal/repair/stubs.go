package repair

import (
	"context"
	"errors"
)

var errTODO = errors.New("repair: not implemented yet")

func (r *Repairer) planReap(ctx context.Context, req ReapRequest) (*Plan, error) { return nil, errTODO }
func (r *Repairer) planRelease(ctx context.Context, req ReleaseRequest) (*Plan, error) {
	return nil, errTODO
}
func (r *Repairer) planTrim(ctx context.Context, req TrimRequest) (*Plan, error) { return nil, errTODO }
func (r *Repairer) planDeadLetter(ctx context.Context, req DeadLetterRequest) (*Plan, error) {
	return nil, errTODO
}
func (r *Repairer) planParked(ctx context.Context, req ParkedRequest) (*Plan, error) {
	return nil, errTODO
}
func (r *Repairer) apply(ctx context.Context, p *Plan, opts ApplyOptions) (Outcome, error) {
	return "", errTODO
}
