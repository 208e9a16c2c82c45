package redisbroker

import "github.com/protctl/protctl/pkg/internal/redisadapter"

// call describes the call an error came from, for mapErr.
type call = redisadapter.Call

// mapErr turns a go-redis error into the contract's errors
// (redisadapter.Map): typed errors for the PROTCTL_WRONGTYPE and
// PROTCTL_LEASELOST replies and the server's WRONGTYPE, and transport
// failures wrapped with broker.ErrUnavailable, keeping the cause.
func mapErr(c call, err error) error { return redisadapter.Map("redisbroker", c, err, nil) }
