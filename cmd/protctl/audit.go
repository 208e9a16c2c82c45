package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/user"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/protctl/protctl/internal/audit"
	"github.com/protctl/protctl/internal/buildinfo"
	"github.com/protctl/protctl/internal/config"
	"github.com/protctl/protctl/internal/output"
	"github.com/protctl/protctl/internal/present"
	"github.com/protctl/protctl/internal/repair"
)

// Every Repairer the factory builds records its applies in the audit log
// (backend.go installs auditRecorder with repair.WithRecorder), so every
// mutator, apply -f and the dashboard are audited by the one Apply they
// all go through, and a new command cannot forget it.

// auditRecorder is the audit log writer of this invocation: who (the OS
// user), where (the host), the context, and the command line with secrets
// redacted.
func (f *Factory) auditRecorder(c redis.UniversalClient, s *config.Settings) *audit.Recorder {
	return audit.NewRecorder(c, audit.Origin{
		User:        osUser(f.Getenv),
		Host:        hostname(),
		Context:     s.Context,
		CommandLine: audit.CommandLine(audit.RedactArgs(append([]string{"protctl"}, f.args...))),
		Version:     buildinfo.Get().Version,
	})
}

// osUser is the operating-system account running protctl, falling back to
// the login name of the environment when the account cannot be looked up
// (a container's uid without a passwd entry).
func osUser(getenv func(string) string) string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	for _, k := range []string{"USER", "LOGNAME", "USERNAME"} {
		if v := getenv(k); v != "" {
			return v
		}
	}
	return "unknown"
}

func hostname() string {
	if h, err := os.Hostname(); err == nil && h != "" {
		return h
	}
	return "unknown"
}

// reportNotRecorded takes Apply's error apart: when the apply went
// through but its audit entry could not be written, it reports that on
// stderr (as a JSON warning object in -o json and jsonl) and returns
// Apply's own error, so the repair's output and exit code stand.
func reportNotRecorded(ios *output.IOStreams, pr *output.Printer, err error) error {
	var rerr *repair.RecordError
	if !errors.As(err, &rerr) {
		return err
	}
	msg := "the repair's results below are real, but it was not recorded in the audit log (" + audit.Key + "): " + rerr.Err.Error()
	switch pr.Format() {
	case output.FormatJSON, output.FormatJSONL:
		enc := json.NewEncoder(ios.ErrOut)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(map[string]warningBody{"warning": {Code: "AUDIT_NOT_RECORDED", Message: msg}})
	default:
		fmt.Fprintf(ios.ErrOut, "protctl: warning: %s\n", output.Escape(msg))
	}
	return rerr.ApplyErr
}

type warningBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func newAuditCmd(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "The audit log: every repair applied, by whom, where, and with what result",
		Long: `Every applied repair (partitions reap, release and skip-head, streams trim,
parked retry and skip, apply -f, and the dashboard's actions) appends one
entry to the Redis stream ` + audit.Key + `: the time, the OS user, the host,
the context, the command line (passwords redacted), and the plan's items with
the state each saw and its result. Dry runs, declined confirmations and plans
with nothing to try are not recorded.

The stream is capped at about ` + fmt.Sprint(audit.DefaultMaxLen) + ` entries (XADD MAXLEN ~).`,
		Example: `  protctl audit ls
  protctl audit ls --since 24h -o json`,
	}
	cmd.AddCommand(newAuditListCmd(f))
	return cmd
}

type auditListOptions struct {
	Printer     *output.Printer
	RedisClient func() (redis.UniversalClient, error)
	Now         func() time.Time

	Limit int64
	Since string
}

func newAuditListCmd(f *Factory) *cobra.Command {
	opts := &auditListOptions{RedisClient: f.RedisClient, Now: f.Now}
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List the audit log, newest first",
		Long: `List the audit log (` + audit.Key + `), newest first: when, who (OS user and
host), the context, the actions, the outcome, each result counted, and the
command line. -o wide adds the entry id, the exit code and the version;
-o json|yaml gives every entry in full, with the plan's items (action,
target, precondition, params, allowed, reason, result, detail).

An outcome of "error" is an apply that stopped half way (interrupted, or
Redis failed); its items say which were applied. A bulk apply of a parked
retry or skip plan (more than one item) is also recorded when it starts
(outcome "started"), so that one killed before its end leaves a trace; the entries of one plan, and of
the apply that resumes it, share its planId (-o json).

Exits 0 (an empty log included), 3 when Redis is unreachable.`,
		Example: `  protctl audit ls
  protctl audit ls --since 24h -o wide
  protctl audit ls --since 2026-03-01T00:00:00Z --limit 0 -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if opts.Limit < 0 {
				return usageError(fmt.Errorf("invalid --limit %d: want 0 (no limit) or more", opts.Limit))
			}
			if _, err := parseSince(opts.Since, opts.Now()); err != nil {
				return usageError(err)
			}
			opts.Printer = f.Printer()
			return runAuditList(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.Int64Var(&opts.Limit, "limit", 50, "list at most the N newest entries; 0 for all")
	fl.StringVar(&opts.Since, "since", "", "only entries from this time on: a duration ago (24h) or an RFC 3339 time")
	return cmd
}

// parseSince reads --since: "" is no bound, a duration is that long
// before now, otherwise an RFC 3339 time.
func parseSince(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, fmt.Errorf("invalid --since %s: want a positive duration", s)
		}
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("invalid --since %q: want a duration (24h) or an RFC 3339 time (2026-03-01T00:00:00Z)", s)
	}
	return t, nil
}

func runAuditList(ctx context.Context, opts *auditListOptions) error {
	since, err := parseSince(opts.Since, opts.Now())
	if err != nil {
		return usageError(err)
	}
	c, err := opts.RedisClient()
	if err != nil {
		return err
	}
	entries, err := audit.List(ctx, c, audit.ListOptions{Limit: opts.Limit, Since: since})
	if err != nil {
		return err
	}
	items := make([]auditItem, len(entries))
	for i := range entries {
		items[i] = auditItemOf(&entries[i])
	}
	pr := opts.Printer
	return pr.PrintList("Audit", items, output.TableSpec{
		Empty: "The audit log is empty: no repair has been applied (" + audit.Key + ").",
		Columns: []output.Column{
			output.Col("TIME", func(a auditItem) string { return pr.Time(a.Entry.Time) }),
			output.Col("USER", func(a auditItem) string { return a.User + "@" + a.Host }),
			output.Col("CONTEXT", func(a auditItem) string { return present.Str(a.Context) }),
			output.Col("ACTIONS", func(a auditItem) string { return present.Dash(strings.Join(a.Actions, ",")) }),
			output.Col("OUTCOME", func(a auditItem) string { return present.Dash(a.Outcome) },
				output.Toned(func(a auditItem) output.Tone { return auditOutcomeTone(a.Outcome) })),
			output.Col("RESULTS", func(a auditItem) string {
				switch {
				case a.Invalid != "":
					return a.Invalid
				case a.Error != nil:
					return a.Summary + "; stopped: " + *a.Error
				}
				return a.Summary
			}),
			output.Col("COMMAND", func(a auditItem) string {
				if a.Via != "" {
					return a.CommandLine + " (via " + a.Via + ")"
				}
				return a.CommandLine
			}),
			output.Col("ID", func(a auditItem) string { return a.ID }, output.WideOnly()),
			output.Col("EXIT", func(a auditItem) string { return fmt.Sprint(a.ExitCode) }, output.WideOnly()),
			output.Col("VERSION", func(a auditItem) string { return present.Dash(a.Version) }, output.WideOnly()),
		},
	})
}

// auditItem is an entry as `audit ls` prints it: the stored Entry with
// the contract's time format (RFC 3339 UTC, milliseconds) and null for
// what is absent. These fields hide the embedded Entry's of the same
// JSON names.
type auditItem struct {
	ID            string  `json:"id"`
	Time          string  `json:"time"`
	StartedAt     *string `json:"startedAt"`
	PlanCreatedAt *string `json:"planCreatedAt"`
	Context       *string `json:"context"`
	Error         *string `json:"error"`
	*audit.Entry
}

func auditItemOf(e *audit.Entry) auditItem {
	return auditItem{
		ID:            e.ID,
		Time:          output.Timestamp(e.Time),
		StartedAt:     output.TimestampOrNull(e.StartedAt),
		PlanCreatedAt: output.TimestampOrNull(e.PlanCreatedAt),
		Context:       nonEmptyStr(e.Context),
		Error:         nonEmptyStr(e.Error),
		Entry:         e,
	}
}

func nonEmptyStr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func auditOutcomeTone(o string) output.Tone {
	switch o {
	case string(repair.OutcomeApplied):
		return output.ToneGood
	case string(repair.OutcomePartial):
		return output.ToneWarn
	case "", audit.OutcomeStarted:
		return output.ToneNone
	}
	return output.ToneBad
}
