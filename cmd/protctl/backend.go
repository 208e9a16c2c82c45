package main

import (
	"time"

	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/repair"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// The operator commands read through an inspect.Inspector and change
// through a repair.Repairer, both built here from the factory's lazy
// providers, so a command's constructor never dials and its tests can
// swap nothing but the Redis URL.

// Inspector returns the read-only data layer over the factory's Redis
// client and layout, with the failure ledger and node membership of the
// runtime's Redis stores (protctl:* keys).
func (f *Factory) Inspector() (*inspect.Inspector, error) {
	c, err := f.RedisClient()
	if err != nil {
		return nil, err
	}
	l, err := f.Layout()
	if err != nil {
		return nil, err
	}
	store := redisstore.New(c)
	return inspect.New(c, l, inspect.WithLedger(store), inspect.WithMembers(store)), nil
}

// Repairer returns the plan/apply layer. Writes go through the Redis
// broker's fenced scripts; plans are stamped with the factory's clock in
// UTC to the millisecond (the contract's time format); every apply that
// tries something is recorded in the audit log (audit.go).
func (f *Factory) Repairer() (*repair.Repairer, error) {
	c, err := f.RedisClient()
	if err != nil {
		return nil, err
	}
	s, err := f.Settings()
	if err != nil {
		return nil, err
	}
	b := redisbroker.New(c, redisbroker.WithLayout(s.Layout))
	return repair.New(c, b,
		repair.WithLedger(redisstore.New(c)),
		repair.WithNow(func() time.Time { return f.Now().UTC().Truncate(time.Millisecond) }),
		repair.WithRecorder(f.auditRecorder(c, s)),
	), nil
}

// Broker returns the Redis broker over the factory's client and layout
// (publish appends through it; partitions ls pages indexes with it).
func (f *Factory) Broker() (*redisbroker.Broker, error) { return f.BrokerWith() }

// BrokerWith is Broker with more options (a publish's replica
// acknowledgements).
func (f *Factory) BrokerWith(opts ...redisbroker.Option) (*redisbroker.Broker, error) {
	c, err := f.RedisClient()
	if err != nil {
		return nil, err
	}
	l, err := f.Layout()
	if err != nil {
		return nil, err
	}
	return redisbroker.New(c, append([]redisbroker.Option{redisbroker.WithLayout(l)}, opts...)...), nil
}

// operatorName is who an operator request is recorded as in the failure
// ledger: "protctl" and the login name when the environment has one.
func (f *Factory) operatorName() string {
	for _, k := range []string{"USER", "LOGNAME", "USERNAME"} {
		if u := f.Getenv(k); u != "" {
			return "protctl:" + u
		}
	}
	return "protctl"
}

// assumeYes reports --yes.
func (f *Factory) assumeYes() bool { return f.flags.yes }
