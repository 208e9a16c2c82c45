package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/repair"
)

// parkedFilterFlags are the filters parked ls, retry and skip share
// (inspect.ParkedFilterSpec). --subscription and --partition are the
// commands' own, since retry and skip give them a meaning with
// SUBSCRIPTION AGGREGATE too.
type parkedFilterFlags struct {
	spec inspect.ParkedFilterSpec
}

// filterFlagNames are the flags that select entries in bulk.
var filterFlagNames = []string{"error", "error-class", "older-than", "newer-than", "key", "position"}

func (ff *parkedFilterFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&ff.spec.Error, "error", "", "only entries whose error matches this regular expression (RE2)")
	fl.StringVar(&ff.spec.ErrorClass, "error-class", "", `only entries whose error is CLASS or CLASS wrapping another ("CLASS: ...")`)
	fl.DurationVar(&ff.spec.OlderThan, "older-than", 0, "only entries parked at least this long ago (server clock), e.g. 30m")
	fl.DurationVar(&ff.spec.NewerThan, "newer-than", 0, "only entries parked less than this long ago (server clock)")
	fl.StringVar(&ff.spec.Key, "key", "", "only entries whose aggregate (Redis: partition key) matches this glob: * ? [a-z] [!a]")
	fl.StringVar(&ff.spec.Position, "position", "", "only entries whose position is in FROM..TO (entry ids for Redis, offsets for Kafka; a side may be left out)")
}

// set reports whether any filter flag was given.
func (ff *parkedFilterFlags) set(cmd *cobra.Command) bool {
	for _, n := range filterFlagNames {
		if cmd.Flags().Changed(n) {
			return true
		}
	}
	return false
}

// compile checks the filter; a bad one is a usage error naming its flag.
func (ff *parkedFilterFlags) compile() (inspect.ParkedFilter, error) {
	f, err := ff.spec.Compile()
	if err != nil {
		return inspect.ParkedFilter{}, filterErr(err)
	}
	return f, nil
}

// filterErr turns an *inspect.FilterError into a usage error naming the
// flag, and a *repair.UnknownSubscriptionError into not found naming
// --subscription; other errors pass.
func filterErr(err error) error {
	var fe *inspect.FilterError
	var us *repair.UnknownSubscriptionError
	switch {
	case errors.As(err, &fe):
		return usageError(fmt.Errorf("invalid --%s %s: %s", fe.Field, fe.Value, fe.Reason))
	case errors.As(err, &us):
		return subscriptionNotFound(us.Subscription, append([]string{}, us.Known...)) // listed, none or some
	}
	return err
}
