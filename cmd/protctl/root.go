package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/protctl/protctl/internal/clierr"
	"github.com/protctl/protctl/internal/config"
	"github.com/protctl/protctl/internal/config/security"
	"github.com/protctl/protctl/internal/output"
)

func init() {
	// Run every PersistentPreRunE from the root down, so a command group
	// can add its own without replacing the root's flag validation.
	cobra.EnableTraverseRunHooks = true
}

// newRootCmd builds the whole command tree on f. Commands are added here,
// one constructor per command group, each taking the factory.
func newRootCmd(f *Factory) *cobra.Command {
	root := &cobra.Command{
		Use:   "protctl",
		Short: "Inspect, repair and run ordered per-key event processing on Redis Streams and Kafka",
		Long: `protctl shows and safely repairs partitioned event processing on Redis Streams
(Protean's sequential_by layout and protctl's own runtime) and Kafka: partition
indexes, leases, generations, checkpoints, lag and parked aggregates. It also
runs nodes of the runtime.

Every change is planned first; --dry-run prints the plan, and applying it
re-checks each item's preconditions atomically. Without a terminal a change
needs --yes.`,
		Example: `  # the version of this binary, as JSON
  protctl version -o json

  # shell completion for bash
  source <(protctl completion bash)`,
		SilenceErrors: true, // main prints errors, in the -o format
		SilenceUsage:  true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			return f.validateGlobalFlags()
		},
	}
	root.SetIn(f.IOStreams.In)
	root.SetOut(f.IOStreams.Out)
	root.SetErr(f.IOStreams.ErrOut)
	root.CompletionOptions.DisableDefaultCmd = true // ours is newCompletionCmd
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return usageError(err)
	})

	addGlobalFlags(root, f)

	root.AddCommand(
		newPartitionsCmd(f),
		newLeasesCmd(f),
		newStreamsCmd(f),
		newParkedCmd(f),
		newPauseCmd(f),
		newResumeCmd(f),
		newDLQCmd(f),
		newTopicsCmd(f),
		newNodesCmd(f),
		newCheckCmd(f),
		newExporterCmd(f),
		newApplyCmd(f),
		newAuditCmd(f),
		newPublishCmd(f),
		newRunCmd(f),
		newDemoCmd(f),
		newTUICmd(f),
		newContextCmd(f),
		newConfigCmd(f),
		newVersionCmd(f),
		newCompletionCmd(f),
		newDocsCmd(f),
		newManCmd(f),
		newACLCmd(f),
	)

	attachDynamicCompletion(root, f) // complete.go: names read from Redis, bounded
	finishTree(root)
	// The usage line of a group is "protctl partitions [command]", even
	// though finishTree gave it a run function.
	root.SetUsageTemplate(strings.Replace(root.UsageTemplate(),
		"{{if .Runnable}}", "{{if and .Runnable (not .HasAvailableSubCommands)}}", 1))
	return root
}

func addGlobalFlags(root *cobra.Command, f *Factory) {
	fl := root.PersistentFlags()
	g := &f.flags
	fl.StringVar(&g.redis, "redis", "", "Redis URL, redis://, rediss://, unix:// or redis+sentinel://HOST:26379,.../MASTER/DB (env "+config.EnvRedis+"; default "+config.DefaultRedisURL+")")
	fl.StringVar(&g.kafka, "kafka", "", "Kafka brokers, comma-separated (env "+config.EnvKafka+")")
	fl.StringVar(&g.layout, "layout", "", "Redis key layout: protean or cluster (env "+config.EnvLayout+"; default protean)")
	fl.StringVar(&g.context, "context", "", "context of the config file to use (env "+config.EnvContext+"; default its currentContext)")
	fl.StringVar(&g.configPath, "config", "", "contexts file (env "+config.EnvConfig+"; default $XDG_CONFIG_HOME/protctl/config.yaml)")
	fl.StringVar(&g.tlsCA, "redis-tls-ca", "", "PEM file of the CA that signed the Redis server's certificate")
	fl.StringVar(&g.tlsCert, "redis-tls-cert", "", "PEM file of the Redis TLS client certificate")
	fl.StringVar(&g.tlsKey, "redis-tls-key", "", "PEM file of the Redis TLS client key")
	fl.BoolVar(&g.kafkaTLS, "kafka-tls", false, "dial Kafka over TLS (env "+config.EnvKafkaTLS+"; implied by --kafka-tls-ca/-cert)")
	fl.StringVar(&g.kafkaTLSCA, "kafka-tls-ca", "", "PEM file of the CA that signed the Kafka brokers' certificates (env "+config.EnvKafkaTLSCA+")")
	fl.StringVar(&g.kafkaTLSCert, "kafka-tls-cert", "", "PEM file of the Kafka TLS client certificate (env "+config.EnvKafkaTLSCert+")")
	fl.StringVar(&g.kafkaTLSKey, "kafka-tls-key", "", "PEM file of the Kafka TLS client key (env "+config.EnvKafkaTLSKey+")")
	fl.StringVar(&g.kafkaMechanism, "kafka-sasl-mechanism", "", "Kafka SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (env "+config.EnvKafkaMechanism+")")
	fl.StringVar(&g.kafkaUsername, "kafka-username", "", "Kafka SASL user (env "+config.EnvKafkaUsername+"; the password only from "+config.EnvKafkaPassword+" or a file)")
	fl.StringVarP(&g.output, "output", "o", "table", "output format: table, wide, json, jsonl or yaml")
	fl.BoolVar(&g.noHeaders, "no-headers", false, "omit table headers")
	fl.StringVar(&g.color, "color", "auto", "colour: auto (a terminal without NO_COLOR), always or never")
	fl.DurationVar(&g.timeout, "timeout", DefaultTimeout, "bound on each backend request (connect, read, write); 0 for none")
	fl.BoolVar(&g.readOnly, "read-only", false, "refuse every change (env "+config.EnvReadOnly+"; or the context's readOnly)")
	fl.BoolVar(&g.yes, "yes", false, "apply changes without asking (required to change anything when stdin is not a terminal)")
	fl.BoolVar(&g.dryRun, "dry-run", false, "print the plan of a change and exit without changing anything")
	fl.CountVarP(&g.verbose, "verbose", "v", "log more to stderr (-v info, -vv debug)")
	f.flagSet = fl

	complete := func(values ...string) func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return cobra.FixedCompletions(values, cobra.ShellCompDirectiveNoFileComp)
	}
	formats := make([]string, 0, 5)
	for _, ft := range output.Formats() {
		formats = append(formats, string(ft))
	}
	_ = root.RegisterFlagCompletionFunc("output", complete(formats...))
	_ = root.RegisterFlagCompletionFunc("color", complete("auto", "always", "never"))
	_ = root.RegisterFlagCompletionFunc("layout", complete("protean", "cluster"))
	_ = root.RegisterFlagCompletionFunc("kafka-sasl-mechanism", complete(security.Mechanisms...))
	_ = root.RegisterFlagCompletionFunc("context", func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return f.contextNames(), cobra.ShellCompDirectiveNoFileComp
	})
	for _, name := range []string{"config", "redis-tls-ca", "redis-tls-cert", "redis-tls-key", "kafka-tls-ca", "kafka-tls-cert", "kafka-tls-key"} {
		_ = root.MarkPersistentFlagFilename(name)
	}
}

// validateGlobalFlags checks the flags every command shares and applies
// --color, before any command runs.
func (f *Factory) validateGlobalFlags() error {
	if _, err := output.ParseFormat(f.flags.output); err != nil {
		return usageError(err)
	}
	mode, err := output.ParseColorMode(f.flags.color)
	if err != nil {
		return usageError(err)
	}
	f.IOStreams.SetColorMode(mode)
	if f.changed("layout") && f.flags.layout != "protean" && f.flags.layout != "cluster" {
		return usageError(fmt.Errorf("invalid --layout %q: want protean or cluster", f.flags.layout))
	}
	if f.flags.timeout < 0 {
		return usageError(fmt.Errorf("invalid --timeout %s: want 0 or more", f.flags.timeout))
	}
	return nil
}

// contextNames lists the contexts for shell completion; errors list none.
func (f *Factory) contextNames() []string {
	file, _, err := f.ConfigFile()
	if err != nil {
		return nil
	}
	return file.Names()
}

// finishTree makes the contract's exit codes hold for every command,
// including those added later:
//
//   - argument errors (wrong count, invalid values, missing required or
//     conflicting flags) are USAGE errors (exit 2), not internal ones;
//   - a command group (subcommands, no run function of its own) shows its
//     help when called alone and rejects an unknown subcommand with a
//     USAGE error, where cobra would print help and exit 0.
func finishTree(c *cobra.Command) {
	for _, sub := range c.Commands() {
		finishTree(sub)
	}
	if c.HasSubCommands() && !c.Runnable() {
		c.Args = func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return unknownCommand(cmd, args[0])
			}
			return nil
		}
		c.RunE = func(cmd *cobra.Command, args []string) error {
			return cmd.Help()
		}
	}
	validate := c.Args
	c.Args = func(cmd *cobra.Command, args []string) error {
		if validate != nil {
			if err := validate(cmd, args); err != nil {
				return usageError(err)
			}
		}
		// cobra checks these after Args, with plain errors; checking them
		// here first makes them usage errors. cobra's own check then passes.
		if err := cmd.ValidateRequiredFlags(); err != nil {
			return usageError(err)
		}
		if err := cmd.ValidateFlagGroups(); err != nil {
			return usageError(err)
		}
		return nil
	}
}

func unknownCommand(cmd *cobra.Command, name string) error {
	msg := fmt.Sprintf("unknown command %q for %q", name, cmd.CommandPath())
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2
	}
	if s := cmd.SuggestionsFor(name); len(s) > 0 {
		msg += "; did you mean " + strings.Join(s, " or ") + "?"
	}
	return usageError(errors.New(msg))
}

// commandLineError marks errors in how the command was called (flags,
// arguments), after which the user is pointed to --help.
type commandLineError struct{ error }

func (e commandLineError) Unwrap() error { return e.error }

// usageError is a USAGE error (exit 2) about the command line.
func usageError(err error) error {
	return clierr.Usage.Wrap(commandLineError{err})
}
