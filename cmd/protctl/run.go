package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/protctl/protctl/internal/clierr"
	"github.com/protctl/protctl/internal/nodeconfig"
	"github.com/protctl/protctl/pkg/runtime"
)

func newRunCmd(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "run",
		Short:   "Run a node of the runtime",
		Example: `  protctl run node --config node.yaml`,
	}
	cmd.AddCommand(newRunNodeCmd(f))
	return cmd
}

type runNodeOptions struct {
	Out, ErrOut io.Writer
	Getenv      func(string) string

	ConfigPath string
	LogFormat  string
	LogLevel   slog.Level
	// Ready, when set, is called once the node and its admin endpoint
	// have started (tests).
	Ready func(adminAddr string)
}

func newRunNodeCmd(f *Factory) *cobra.Command {
	opts := &runNodeOptions{}
	var level string
	cmd := &cobra.Command{
		Use:   "node --config FILE",
		Short: "Run a node of the runtime in the foreground (SIGTERM drains)",
		Long: `Run a node of the runtime: the subscriptions of the config file (Redis
partitioned streams and Kafka topics), each with an exec, http, process or log handler,
sharing partitions with the service's other nodes under fenced leases.
docs/node-config.md documents the file; testdata/node.yaml is an example.

An exec handler's command gets the envelope on stdin and PROTCTL_SUBSCRIPTION,
PROTCTL_PARTITION, PROTCTL_POSITION, PROTCTL_GENERATION and PROTCTL_ATTEMPT in
its environment; it exits 0 when done, 75 to be called again later (systemic),
anything else when the message failed. An http handler POSTs the envelope: 2xx
is done; 429, 5xx and timeouts are systemic; other 4xx failures. A process
handler keeps one child running and writes it a JSON request per line on stdin
({"id", "metadata", "envelope"}); the child answers {"id", "result": "ok",
"error" or "retry"} per line on stdout, several calls in flight at once.

The admin endpoint (admin.listen, loopback by default) serves /healthz,
/readyz (503 until the node joined), /metrics (Prometheus) and /v1/status.

SIGTERM or SIGINT drains: no new message starts, in-flight messages finish
(up to drain.timeout), their acks and checkpoints are saved, leases released
and the node leaves the membership, then protctl exits 0. A second signal
exits at once (130). Logs go to stderr. A config error exits 2 naming the
field; Redis unreachable at start exits 3.`,
		Example: `  protctl run node --config node.yaml
  protctl run node --config node.yaml --log-format json --log-level debug
  PROTCTL_REDIS_PASSWORD=... protctl run node --config /etc/protctl/node.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			// The node's endpoints come from its config file only, so that
			// one file says everything about a deployed node.
			for _, name := range []string{"redis", "kafka", "layout", "context"} {
				if f.changed(name) {
					return usageError(fmt.Errorf("--%s is not used by run node: set it in the config file (--config)", name))
				}
			}
			if opts.ConfigPath == "" {
				return usageError(errors.New("--config is required"))
			}
			switch opts.LogFormat {
			case "text", "json":
			default:
				return usageError(fmt.Errorf("invalid --log-format %q: want text or json", opts.LogFormat))
			}
			if err := opts.LogLevel.UnmarshalText([]byte(level)); err != nil {
				return usageError(fmt.Errorf("invalid --log-level %q: want debug, info, warn or error", level))
			}
			opts.Out, opts.ErrOut, opts.Getenv = f.IOStreams.Out, f.IOStreams.ErrOut, f.Getenv
			return runNode(cmd.Context(), opts)
		},
	}
	// Not "config": that is the global contexts-file flag, which run node
	// does not read; a local flag of the same name shadows it here.
	cmd.Flags().StringVar(&opts.ConfigPath, "config", "", "the node's config file (YAML; see docs/node-config.md)")
	cmd.Flags().StringVar(&opts.LogFormat, "log-format", "text", "log format on stderr: text or json")
	cmd.Flags().StringVar(&level, "log-level", "info", "log level: debug, info, warn or error")
	_ = cmd.MarkFlagFilename("config", "yaml", "yml")
	_ = cmd.RegisterFlagCompletionFunc("log-format", cobra.FixedCompletions([]string{"text", "json"}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("log-level", cobra.FixedCompletions([]string{"debug", "info", "warn", "error"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func newNodeLogger(w io.Writer, format string, level slog.Level) *slog.Logger {
	ho := &slog.HandlerOptions{Level: level}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, ho))
	}
	return slog.New(slog.NewTextHandler(w, ho))
}

// runNode runs the node until ctx ends (the first SIGTERM or SIGINT: main
// exits 130 on the second), then drains it within drain.timeout.
func runNode(ctx context.Context, opts *runNodeOptions) error {
	cfg, err := nodeconfig.Load(opts.ConfigPath, opts.Getenv)
	if err != nil {
		return clierr.Usage.Wrap(err)
	}
	log := newNodeLogger(opts.ErrOut, opts.LogFormat, opts.LogLevel).With("service", cfg.Service, "node", cfg.Node)

	n, err := buildNode(cfg, log, opts.Out)
	if err != nil {
		return err
	}
	defer n.close()

	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = n.redis.Ping(pingCtx).Err()
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if hint := redisAuthHint(err); hint != "" {
			return clierr.Unavailable.Errorf("redis.url %s: Redis refused the login: %w%s", nodeconfig.RedactURL(cfg.Redis.URL), err, hint)
		}
		return clierr.Unavailable.Errorf("redis.url %s: cannot reach Redis: %w", nodeconfig.RedactURL(cfg.Redis.URL), err)
	}

	if err := n.startAdmin(); err != nil {
		return err
	}
	if err := n.node.Start(ctx); err != nil {
		return err
	}
	names := make([]string, 0, len(cfg.Subscriptions))
	for _, s := range cfg.Subscriptions {
		names = append(names, s.Name)
	}
	log.Info("node started", "admin", n.adminAddr(), "subscriptions", strings.Join(names, ","),
		"leaseTTL", cfg.Lease.TTL.D(), "renewEvery", cfg.Lease.RenewEvery.D())
	if opts.Ready != nil {
		opts.Ready(n.adminAddr())
	}

	// Run until the first signal, or until every subscription has failed.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var failed error
wait:
	for {
		select {
		case <-ctx.Done():
			break wait
		case <-tick.C:
			if n.node.Status().JoinState == runtime.JoinFailed {
				failed = n.node.Err()
				break wait
			}
		}
	}

	// Drain: a context of its own, since ctx is already cancelled.
	deadline := cfg.Drain.Timeout.D()
	log.Info("draining", "deadline", deadline, "held", len(n.node.Status().Held))
	start := time.Now()
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), deadline)
	defer cancel()
	stopErr := n.node.Stop(dctx)
	n.stopAdmin(dctx)
	switch {
	case failed != nil:
		return newLineErrors("every subscription failed:", failed)
	case stopErr != nil && dctx.Err() != nil:
		log.Error("drain did not finish in time: handlers cancelled, their messages stay pending for the next owner", "deadline", deadline, "err", stopErr)
		return clierr.Interrupted.Wrap(newLineErrors(fmt.Sprintf("drain did not finish within %s (drain.timeout):", deadline), stopErr))
	case stopErr != nil:
		log.Error("drain finished with errors", "err", stopErr, "took", time.Since(start))
		return newLineErrors("drain finished with errors:", stopErr)
	}
	log.Info("drained: leases released, membership left", "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// redisAuthHint names the settings to fix when Redis refused the
// credentials (its reply prefixes WRONGPASS and NOAUTH).
func redisAuthHint(err error) string {
	msg := err.Error()
	if strings.HasPrefix(msg, "WRONGPASS") || strings.HasPrefix(msg, "NOAUTH") {
		return fmt.Sprintf(" (check redis.username and the password: %s, redis.passwordFile or the URL's)", nodeconfig.EnvRedisPassword)
	}
	return ""
}

// lineErrors is a heading and several errors (errors.Join's, such as the
// node's fatal errors), printed one per line (printError's multiLine),
// not joined by escaped line breaks.
type lineErrors struct {
	head string
	errs []error
}

// newLineErrors splits err into its joined errors (errors.Join's, whose
// nil members it already dropped) under head.
func newLineErrors(head string, err error) error {
	le := &lineErrors{head: head}
	if j, ok := err.(interface{ Unwrap() []error }); ok && isJoin(err) {
		le.errs = j.Unwrap()
	} else {
		le.errs = []error{err}
	}
	return le
}

// isJoin reports whether err is errors.Join's (its message is its
// errors' joined by line breaks), not fmt.Errorf's with several %w.
func isJoin(err error) bool {
	j := err.(interface{ Unwrap() []error })
	msgs := make([]string, 0, len(j.Unwrap()))
	for _, e := range j.Unwrap() {
		msgs = append(msgs, e.Error())
	}
	return err.Error() == strings.Join(msgs, "\n")
}

func (e *lineErrors) Error() string { return strings.Join(e.Lines(), "\n") }

// Lines are the heading and then one line per error; a line break inside
// one is written \n.
func (e *lineErrors) Lines() []string {
	out := []string{e.head}
	for _, err := range e.errs {
		out = append(out, strings.NewReplacer("\r", `\r`, "\n", `\n`).Replace(err.Error()))
	}
	return out
}

func (e *lineErrors) Unwrap() []error { return e.errs }
