package main

import (
	"github.com/spf13/cobra"

	"github.com/protctl/protctl/internal/repair"
)

func newDLQPurgeCmd(f *Factory) *cobra.Command {
	opts := &dlqChangeOptions{IO: f.IOStreams, Action: repair.ActionDLQPurge}
	cmd := &cobra.Command{
		Use:   "purge CATEGORY",
		Short: "Delete dead letters, exactly the ones planned, fenced on each entry",
		Long: `Delete the dead letters of CATEGORY that the filters select. The plan lists
each one; applying deletes exactly those, each only while it is still the
entry the plan saw: dead letters added since the plan stay, and one gone or
changed since is a conflict (exit 5, or 7 when others were deleted).`,
		Example: `  protctl dlq purge shop::order --reason '^poison' --dry-run
  protctl dlq purge shop::order --key o-1 --older-than 168h --yes`,
	}
	return opts.finish(f, cmd, "delete")
}
