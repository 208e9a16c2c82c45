package main

import (
	"fmt"
	"io"
	"time"

	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/output"
)

// staleTone warns when fsck found stale consumers.
func staleTone(cs []inspect.StaleConsumer) output.Tone {
	if len(cs) > 0 {
		return output.ToneWarn
	}
	return output.ToneGood
}

// printStaleConsumers is fsck's table of stale consumers (none: nothing).
func printStaleConsumers(ios *output.IOStreams, w io.Writer, cs []inspect.StaleConsumer) error {
	if len(cs) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	return viewPrinter(ios, w).PrintList("StaleConsumer", cs, output.TableSpec{Columns: []output.Column{
		output.Col("KEY", func(c inspect.StaleConsumer) string { return c.Key }),
		output.Col("STREAM", func(c inspect.StaleConsumer) string { return c.Stream }),
		output.Col("GROUP", func(c inspect.StaleConsumer) string { return c.Group }),
		output.Col("CONSUMER", func(c inspect.StaleConsumer) string { return c.Consumer }),
		output.Col("IDLE", func(c inspect.StaleConsumer) string {
			return (time.Duration(c.IdleMs) * time.Millisecond).Round(time.Second).String()
		}),
		output.Col("LEASE", func(c inspect.StaleConsumer) string {
			if c.Lease == nil {
				return "free"
			}
			return *c.Lease
		}),
	}})
}
