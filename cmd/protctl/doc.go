// Command protctl inspects, repairs and runs ordered per-key event
// processing on Redis Streams and Kafka. docs/cli.md is its reference,
// generated from this command tree.
//
// # Adding a command
//
// One command (or command group) per file, in the shape of version.go:
//
//	type leasesListOptions struct {
//		Printer *output.Printer
//		Redis   func() (redis.UniversalClient, error)
//		Layout  func() (broker.Layout, error)
//		Group   string
//	}
//
//	func newLeasesListCmd(f *Factory) *cobra.Command {
//		opts := &leasesListOptions{Redis: f.RedisClient, Layout: f.Layout}
//		cmd := &cobra.Command{
//			Use: "ls", Short: "...", Example: "  protctl leases ls --group G",
//			Args: cobra.NoArgs,
//			RunE: func(cmd *cobra.Command, args []string) error {
//				opts.Printer = f.Printer()
//				return runLeasesList(cmd.Context(), opts)
//			},
//		}
//		cmd.Flags().StringVar(&opts.Group, "group", "", "...")
//		return cmd
//	}
//
// RunE only copies and validates; the run function does the work and
// prints through opts.Printer (PrintList with a TableSpec for lists,
// PrintObject for one object). Add the constructor in newRootCmd before
// finishTree, then run `make docs`.
//
// The rules the tree enforces or the factory provides:
//   - Nothing dials or reads the config file until a provider is called
//     (f.Settings, f.RedisClient, f.Layout, f.ConfigFile), so --help and
//     completion stay offline. The factory closes the Redis client.
//   - Errors: return clierr.NotFound/Conflict/Refused/Partial/CheckFailed
//     .Errorf or .Wrap when the exit code is more specific than 1; broker
//     sentinels, network errors and deadlines are classified without
//     wrapping. Argument and flag errors exit 2 on their own. Never print
//     an error yourself: main does, as JSON in -o json mode.
//   - Mutators: build the plan; with f.DryRun() print it and return; else
//     f.CheckWritable(), then f.Confirm(ctx, question), then apply.
//   - Output: results to stdout only through the Printer; progress through
//     f.IOStreams.NewProgress; logs through f.Logger(). JSON fields follow
//     docs/cli.md (output.Timestamp for times, integer ms for durations).
//   - Every command has Short and Example (a test checks).
//
// Tests run the tree in-process with newCLI(t) (helpers_test.go): an empty
// environment plus cl.env, test streams with cl.tty and cl.stdin, and the
// result's exit code, stdout and stderr. Point --redis at a server from
// internal/testenv; never at the user's 6379.
package main
