package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/protctl/protctl/internal/clierr"
	"github.com/protctl/protctl/internal/config"
	"github.com/protctl/protctl/internal/output"
)

// connectionFlags maps the global connection flags to the context fields
// they set in "context add" and "context set": the flags that would pick
// a deployment for one command store it in the context instead.
var connectionFlags = []struct{ flag, field string }{
	{"redis", "redis.url"},
	{"layout", "redis.layout"},
	{"redis-tls-ca", "redis.tls.ca"},
	{"redis-tls-cert", "redis.tls.cert"},
	{"redis-tls-key", "redis.tls.key"},
	{"kafka", "kafka.brokers"},
	{"kafka-tls", "kafka.tls.enabled"},
	{"kafka-tls-ca", "kafka.tls.ca"},
	{"kafka-tls-cert", "kafka.tls.cert"},
	{"kafka-tls-key", "kafka.tls.key"},
	{"kafka-sasl-mechanism", "kafka.sasl.mechanism"},
	{"kafka-username", "kafka.sasl.username"},
}

// fieldSetting is one change to a context: where it came from (a flag or
// a FIELD=VALUE argument, named in errors) and the field and value.
type fieldSetting struct {
	source, field, value string
}

type contextEditOptions struct {
	IO         *output.IOStreams
	Printer    *output.Printer
	File       func() (*config.File, string, error)
	Name       string
	Settings   []fieldSetting
	Categories []string
	Force      bool
	Use        bool
	adding     bool
}

const fieldsHelp = `Fields (FIELD=VALUE arguments; an empty VALUE clears the field, a list is
comma-separated, a bool is true or false):
  `

func fieldList() string {
	return strings.Join(config.ContextFieldNames(), "\n  ")
}

func newContextAddCmd(f *Factory) *cobra.Command {
	opts := &contextEditOptions{IO: f.IOStreams, File: f.ConfigFile, adding: true}
	cmd := &cobra.Command{
		Use:   "add NAME [FIELD=VALUE...]",
		Short: "Add a context to the config file",
		Long: `Add a context to the config file without writing YAML. The connection flags
(--redis, --layout, --kafka, --redis-tls-*, --kafka-tls*, --kafka-sasl-mechanism,
--kafka-username) are stored in the context instead of being used; any other
field is a FIELD=VALUE argument. An existing name is refused (exit 2) unless
--force, which replaces that context whole.

Passwords are never stored: a --redis URL with a password is refused; name a
file with redis.passwordFile / redis.sentinel.passwordFile /
kafka.sasl.passwordFile, or set PROTCTL_REDIS_PASSWORD /
PROTCTL_REDIS_SENTINEL_PASSWORD / PROTCTL_KAFKA_PASSWORD when running. Bad
input (an unknown field, a bad URL or layout, a Sentinel URL without a master
name or with the cluster layout) exits 2 and leaves the file unchanged.
The file is written atomically (a temporary file renamed over it), mode 0600,
keeping the other contexts and the comments outside the edited context.
Only the local file changes, so this is allowed in read-only mode.

` + fieldsHelp + fieldList(),
		Example: `  protctl context add staging --redis rediss://redis.staging:6380/0 --layout cluster
  protctl context add prod --redis rediss://ops@redis.prod:6380/0 redis.passwordFile=~/.config/protctl/prod.password \
      --kafka k1:9093,k2:9093 --category shop::order readOnly=true protected=true --use
  protctl context add local --redis redis://127.0.0.1:6379/0 --force -o json
  protctl context add ha --redis redis+sentinel://s1:26379,s2:26379,s3:26379/mymaster/0 \
      redis.passwordFile=~/.config/protctl/ha.password \
      redis.sentinel.username=sentinel-ops redis.sentinel.passwordFile=~/.config/protctl/ha-sentinel.password`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Printer = f.Printer()
			return runContextEdit(f, cmd, opts, args)
		},
	}
	cmd.Flags().StringArrayVar(&opts.Categories, "category", nil, "a category the context works with (repeatable; the categories field)")
	cmd.Flags().BoolVar(&opts.Force, "force", false, "replace a context of the same name")
	cmd.Flags().BoolVar(&opts.Use, "use", false, "also make it the current context")
	return cmd
}

func newContextSetCmd(f *Factory) *cobra.Command {
	opts := &contextEditOptions{IO: f.IOStreams, File: f.ConfigFile}
	cmd := &cobra.Command{
		Use:   "set NAME [FIELD=VALUE...]",
		Short: "Change fields of a context of the config file",
		Long: `Change fields of an existing context (exit 4 when there is none of that name),
from FIELD=VALUE arguments and the connection flags (--redis, --layout,
--kafka, ... as in "context add"). Fields not named keep their values.
The same rules as "context add": no passwords, bad input exits 2 and leaves
the file unchanged, atomic write, allowed in read-only mode.

` + fieldsHelp + fieldList(),
		Example: `  protctl context set staging --redis rediss://redis2.staging:6380/0
  protctl context set prod readOnly=false categories=shop::order,shop::payment
  protctl context set prod kafka.sasl.mechanism=SCRAM-SHA-512 kafka.sasl.username=ops \
      kafka.sasl.passwordFile=~/.config/protctl/prod-kafka.password
  protctl context set prod redis.username=   # clear a field`,
		Args: cobra.MinimumNArgs(1),
		ValidArgsFunction: func(cmd *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
			if len(args) > 0 {
				return config.ContextFieldNames(), cobra.ShellCompDirectiveNoSpace | cobra.ShellCompDirectiveNoFileComp
			}
			return f.contextNames(), cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Printer = f.Printer()
			return runContextEdit(f, cmd, opts, args)
		},
	}
	cmd.Flags().BoolVar(&opts.Use, "use", false, "also make it the current context")
	return cmd
}

func runContextEdit(f *Factory, cmd *cobra.Command, opts *contextEditOptions, args []string) error {
	opts.Name = args[0]
	if strings.TrimSpace(opts.Name) == "" || strings.Contains(opts.Name, "=") {
		return clierr.Usage.Errorf("invalid context name %q: the first argument is the context's NAME", opts.Name)
	}
	for _, cf := range connectionFlags {
		if fl := cmd.Flags().Lookup(cf.flag); fl != nil && fl.Changed {
			opts.Settings = append(opts.Settings, fieldSetting{"--" + cf.flag, cf.field, fl.Value.String()})
		}
	}
	if opts.Categories != nil {
		opts.Settings = append(opts.Settings, fieldSetting{"--category", "categories", strings.Join(opts.Categories, ",")})
	}
	for _, a := range args[1:] {
		field, value, ok := strings.Cut(a, "=")
		if !ok {
			return clierr.Usage.Errorf("argument %s: want FIELD=VALUE (fields: %s)", a, strings.Join(config.ContextFieldNames(), ", "))
		}
		opts.Settings = append(opts.Settings, fieldSetting{"argument " + field, field, value})
	}
	if !opts.adding && len(opts.Settings) == 0 && !opts.Use {
		return clierr.Usage.Errorf("context set %s: nothing to change: give FIELD=VALUE arguments or connection flags", opts.Name)
	}

	file, path, err := opts.File()
	if err != nil {
		return err
	}
	existing, _ := file.Context(opts.Name)
	var c *config.Context
	switch {
	case opts.adding && existing != nil && !opts.Force:
		return clierr.Usage.Errorf("context %q already exists in %s: pass --force to replace it, or change fields with \"protctl context set\"", opts.Name, path)
	case opts.adding && existing != nil:
		*existing = config.Context{Name: opts.Name}
		c = existing
	case opts.adding:
		file.Contexts = append(file.Contexts, config.Context{Name: opts.Name})
		c = &file.Contexts[len(file.Contexts)-1]
	case existing == nil:
		_, err := file.Context(opts.Name)
		return clierr.NotFound.Wrap(err)
	default:
		c = existing
	}
	for _, s := range opts.Settings {
		if err := c.SetField(s.field, s.value); err != nil {
			return clierr.Usage.Errorf("%s: %w", s.source, err)
		}
	}
	if opts.Use {
		file.CurrentContext = opts.Name
	}
	if err := file.Validate(); err != nil {
		return clierr.Usage.Errorf("%w (nothing was written to %s)", err, path)
	}
	if err := file.Save(path); err != nil {
		return err
	}
	verb := "Changed"
	if opts.adding {
		verb = "Added"
		if existing != nil {
			verb = "Replaced"
		}
	}
	if _, err := fmt.Fprintf(opts.IO.ErrOut, "%s context %q in %s.\n", verb, opts.Name, path); err != nil {
		return err
	}
	item := contextItemOf(*c, file.CurrentContext)
	return opts.Printer.PrintObject("Context", item, func(w io.Writer, st output.Styles) error {
		return output.WriteFields(w, st, contextFieldsView(item)...)
	})
}

func contextFieldsView(c contextItem) []output.Field {
	yesNo := map[bool]string{true: "yes", false: "no"}
	return []output.Field{
		{Label: "Name", Value: c.Name},
		{Label: "Current", Value: yesNo[c.Current]},
		{Label: "Redis", Value: orDash(c.Redis.URL)},
		{Label: "Layout", Value: c.Redis.Layout},
		{Label: "Redis user", Value: orDash(c.Redis.Username)},
		{Label: "Password file", Value: orDash(c.Redis.PasswordFile)},
		{Label: "Kafka", Value: orDash(nonEmpty(strings.Join(c.Kafka.Brokers, ",")))},
		{Label: "Categories", Value: orDash(nonEmpty(strings.Join(c.Categories, ",")))},
		{Label: "Read-only", Value: yesNo[c.ReadOnly]},
		{Label: "Protected", Value: yesNo[c.Protected]},
	}
}

type contextDeleteOptions struct {
	IO      *output.IOStreams
	Printer *output.Printer
	File    func() (*config.File, string, error)
	Name    string
	Force   bool
}

func newContextDeleteCmd(f *Factory) *cobra.Command {
	opts := &contextDeleteOptions{IO: f.IOStreams, File: f.ConfigFile}
	cmd := &cobra.Command{
		Use:     "delete NAME",
		Aliases: []string{"rm"},
		Short:   "Remove a context from the config file",
		Long: `Remove a context from the config file (exit 4 when there is none of that name).
The current context is refused (exit 6) unless --force, which also clears
currentContext, so that later commands fall back to the flags, the
environment and the defaults rather than to a context that is gone. The file
is written atomically, keeping the other contexts and their comments; only
the local file changes, so this is allowed in read-only mode.`,
		Example: `  protctl context delete staging
  protctl context delete prod --force   # the current context: also clears currentContext`,
		Args: cobra.ExactArgs(1),
		ValidArgsFunction: func(cmd *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
			if len(args) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			return f.contextNames(), cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Name = args[0]
			opts.Printer = f.Printer()
			return runContextDelete(opts)
		},
	}
	cmd.Flags().BoolVar(&opts.Force, "force", false, "delete the current context too (clearing currentContext)")
	return cmd
}

func runContextDelete(opts *contextDeleteOptions) error {
	file, path, err := opts.File()
	if err != nil {
		return err
	}
	if _, err := file.Context(opts.Name); err != nil {
		return clierr.NotFound.Wrap(err)
	}
	wasCurrent := file.CurrentContext == opts.Name
	if wasCurrent && !opts.Force {
		return clierr.Refused.Errorf("context %q is the current context of %s: pass --force to delete it and clear currentContext, or \"protctl context use\" another first", opts.Name, path)
	}
	file.RemoveContext(opts.Name)
	if wasCurrent {
		file.CurrentContext = ""
	}
	if err := file.Save(path); err != nil {
		return err
	}
	msg := fmt.Sprintf("Deleted context %q from %s.", opts.Name, path)
	if wasCurrent {
		msg += " There is no current context now."
	}
	if _, err := fmt.Fprintln(opts.IO.ErrOut, msg); err != nil {
		return err
	}
	obj := struct {
		Name           string `json:"name"`
		Deleted        bool   `json:"deleted"`
		ClearedCurrent bool   `json:"clearedCurrentContext"`
	}{opts.Name, true, wasCurrent}
	return opts.Printer.PrintObject("ContextDeletion", obj, func(w io.Writer, st output.Styles) error {
		return output.WriteFields(w, st,
			output.Field{Label: "Deleted", Value: opts.Name},
			output.Field{Label: "Cleared current", Value: map[bool]string{true: "yes", false: "no"}[wasCurrent]})
	})
}
