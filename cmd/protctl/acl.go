package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/protctl/protctl/internal/acl"
	"github.com/protctl/protctl/internal/output"
	"github.com/protctl/protctl/pkg/broker"
)

func newACLCmd(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "acl",
		Short: "Least-privilege Redis ACL rules for protctl's roles",
		Long: `Least-privilege Redis ACL rules for protctl's three roles: readonly (every
ls, show, check, fsck and --dry-run, and the dashboard in read-only mode),
operator (readonly plus every repair, publish and the audit log) and node
(protctl run node). docs/security.md explains them.`,
		Example: `  # the rules of the read-only user
  protctl acl print --role readonly

  # create the operator user with redis-cli (add >PASSWORD to the line first)
  protctl acl print --role operator --line setuser`,
	}
	cmd.AddCommand(newACLPrintCmd(f))
	return cmd
}

type aclPrintOptions struct {
	Printer    *output.Printer
	Out        io.Writer
	Role       string
	User       string
	Layout     string
	Categories []string
	Groups     []string
	Line       string
}

func newACLPrintCmd(f *Factory) *cobra.Command {
	opts := &aclPrintOptions{}
	cmd := &cobra.Command{
		Use:   "print --role readonly|operator|node",
		Short: "Print the Redis ACL rules a role needs, as an ACL SETUSER command and an ACL file line",
		Long: `Print the Redis ACL rules (commands, key patterns, Pub/Sub channels) that a
role needs and nothing more, as an ACL SETUSER command for redis-cli and as a
line for an ACL file (aclfile). It reads nothing from Redis.

Roles:
  readonly  every ls, show, check, fsck, topics, nodes, audit ls, the plan of
            every repair (--dry-run) and the dashboard in read-only mode; its
            keys are read-only selectors (%R~, Redis 7)
  operator  readonly, plus every repair (partitions reap, release, skip-head,
            streams trim, parked retry and skip, apply -f), publish and the
            audit entry of each applied repair
  node      protctl run node: partitioned subscriptions, the publisher, Kafka
            topic leases and checkpoints, status records and the ledger

The rules contain no password: the user starts with "reset", which removes
every password, so append >PASSWORD (or #SHA256-OF-PASSWORD) to the line
before applying it, and give protctl the password through
PROTCTL_REDIS_PASSWORD or a context's passwordFile, never in argv.

Without --category the key patterns match every name the layout can produce
(the Protean layout's C:K is any name with a ':'); --category (and --group,
which needs --category) narrow them to one deployment's categories and
consumer groups. A command that the role lacks fails with exit 3 and a
"permission denied" error. --line prints plain text: with -o json, jsonl or
yaml it exits 2 (the document has both lines, setUser and aclFileLine).`,
		Example: `  # the read-only user's rules, as a table
  protctl acl print --role readonly

  # create the operator user on the server (add the password first)
  protctl acl print --role operator --user ops --line setuser

  # a node user limited to one category and its consumer group
  protctl acl print --role node --category shop::order --group app.OrderProjector

  # the rules for Redis Cluster, as JSON
  protctl acl print --role readonly --layout cluster -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Printer = f.Printer()
			opts.Out = f.IOStreams.Out
			s, err := f.Settings() // --layout, PROTCTL_LAYOUT or the context's
			if err != nil {
				return err
			}
			opts.Layout = s.Layout.String()
			return runACLPrint(opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Role, "role", "", "the role: readonly, operator or node (required)")
	fl.StringVar(&opts.User, "user", "", `the ACL user name (default "protctl-" + role)`)
	fl.StringArrayVar(&opts.Categories, "category", nil, "limit the key patterns to this category (repeatable; default: every category)")
	fl.StringArrayVar(&opts.Groups, "group", nil, "limit lease keys to this consumer group (repeatable; needs --category)")
	fl.StringVar(&opts.Line, "line", "", "print only one line: setuser (the ACL SETUSER command) or aclfile (an ACL file line)")
	_ = cmd.MarkFlagRequired("role")
	_ = cmd.RegisterFlagCompletionFunc("role", cobra.FixedCompletions([]string{"readonly", "operator", "node"}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("line", cobra.FixedCompletions([]string{"setuser", "aclfile"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func runACLPrint(opts *aclPrintOptions) error {
	role, err := acl.ParseRole(opts.Role)
	if err != nil {
		return usageError(fmt.Errorf("invalid --role %q: want readonly, operator or node", opts.Role))
	}
	layout, err := broker.ParseLayout(opts.Layout)
	if err != nil {
		return usageError(fmt.Errorf("invalid --layout %q: want protean or cluster", opts.Layout))
	}
	switch opts.Line {
	case "", "setuser", "aclfile":
	default:
		return usageError(fmt.Errorf("invalid --line %q: want setuser or aclfile", opts.Line))
	}
	if opts.Line != "" && opts.Printer.Structured() {
		// --line prints one plain line for redis-cli or an ACL file; a
		// document it silently is not would break the program reading it.
		return usageError(fmt.Errorf("--line %s and -o %s do not combine: --line prints one plain line; the -o %s document has both lines (setUser, aclFileLine)",
			opts.Line, opts.Printer.Format(), opts.Printer.Format()))
	}
	p, err := acl.For(role, acl.Options{User: opts.User, Layout: layout, Categories: opts.Categories, Groups: opts.Groups})
	if err != nil {
		return usageError(err)
	}
	switch opts.Line {
	case "setuser":
		_, err := fmt.Fprintln(opts.Out, p.SetUser)
		return err
	case "aclfile":
		_, err := fmt.Fprintln(opts.Out, p.ACLFileLine)
		return err
	}
	return opts.Printer.PrintObject("ACLProfile", p, func(w io.Writer, st output.Styles) error {
		return output.WriteFields(w, st,
			output.Field{Label: "Role", Value: string(p.Role)},
			output.Field{Label: "User", Value: p.User},
			output.Field{Label: "Layout", Value: p.Layout},
			output.Field{Label: "Commands", Value: strings.Join(p.Commands, " ")},
			output.Field{Label: "Keys", Value: strings.Join(p.Keys, " ")},
			output.Field{Label: "Channels", Value: orNone(p.Channels)},
			output.Field{Label: "ACL SETUSER", Value: p.SetUser},
			output.Field{Label: "ACL file", Value: p.ACLFileLine},
		)
	})
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, " ")
}
