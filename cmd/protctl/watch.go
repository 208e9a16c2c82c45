package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/protctl/protctl/internal/clierr"
	"github.com/protctl/protctl/internal/output"
)

// watchOptions is -w/--watch and --watch-interval, the one mechanism
// every list command (partitions ls, leases ls, parked ls, topics ls,
// nodes ls, check) repeats itself with.
type watchOptions struct {
	Watch    bool
	Interval time.Duration
}

func addWatchFlags(cmd *cobra.Command, w *watchOptions) {
	fl := cmd.Flags()
	fl.BoolVarP(&w.Watch, "watch", "w", false, "list again every --watch-interval until interrupted (Ctrl-C ends it with exit 0)")
	fl.DurationVar(&w.Interval, "watch-interval", 2*time.Second, "how often -w lists again")
}

func (w *watchOptions) validate() error {
	if w.Watch && w.Interval <= 0 {
		return usageError(fmt.Errorf("invalid --watch-interval %s: want more than 0", w.Interval))
	}
	return nil
}

// run calls once, and with -w again every Interval, redrawing in place on
// a terminal (like watch(1)), until interrupted. An interruption (Ctrl-C,
// SIGTERM: the only way the command's context ends, see --timeout) ends a
// watch quietly with exit 0, even in the middle of a read: stopping is
// how a watch is meant to end. A failed check (exit 8) does not end it:
// the next round may pass; any other error does.
func (w *watchOptions) run(ctx context.Context, ios *output.IOStreams, pr *output.Printer, once func(context.Context) error) error {
	if !w.Watch {
		return once(ctx)
	}
	for round := 0; ; round++ {
		if round > 0 && ios.IsStdoutTTY() && !pr.Structured() {
			fmt.Fprint(ios.Out, "\x1b[H\x1b[2J")
		}
		err := once(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			if _, kind := clierr.Classify(err); kind != clierr.CheckFailed {
				return err
			}
		}
		t := time.NewTimer(w.Interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}
