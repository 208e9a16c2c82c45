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

func newContextCmd(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "context",
		Short: "List, add, change, delete and switch the contexts of the config file",
		Long: `A context names a deployment: its Redis and Kafka endpoints, its key layout and
its guard rails (readOnly, protected). Contexts live in the config file
($XDG_CONFIG_HOME/protctl/config.yaml, or --config); --context or
PROTCTL_CONTEXT picks one for a single command, "context use" changes the
default. "context add", "context set" and "context delete" edit the file, so
no YAML needs writing by hand.`,
		Example: `  protctl context add staging --redis rediss://redis.staging:6380/0 --use
  protctl context set staging readOnly=true
  protctl context delete staging --force
  protctl context ls
  protctl context use staging
  protctl context current`,
	}
	cmd.AddCommand(newContextListCmd(f), newContextUseCmd(f), newContextCurrentCmd(f),
		newContextAddCmd(f), newContextSetCmd(f), newContextDeleteCmd(f))
	return cmd
}

// contextItem is a context as listed: credentials are never shown, only
// whether a password file is configured.
type contextItem struct {
	Name       string       `json:"name"`
	Current    bool         `json:"current"`
	Redis      contextRedis `json:"redis"`
	Kafka      contextKafka `json:"kafka"`
	Categories []string     `json:"categories"`
	ReadOnly   bool         `json:"readOnly"`
	Protected  bool         `json:"protected"`
}

type contextRedis struct {
	URL          *string `json:"url"`
	Layout       string  `json:"layout"`
	Username     *string `json:"username"`
	PasswordFile *string `json:"passwordFile"`
	// Sentinel is the Sentinels' user and password file; null when the
	// context sets neither.
	Sentinel *config.RedisSentinel `json:"sentinel"`
}

type contextKafka struct {
	Brokers []string `json:"brokers"`
}

type contextListOptions struct {
	Printer *output.Printer
	File    func() (*config.File, string, error)
}

func newContextListCmd(f *Factory) *cobra.Command {
	opts := &contextListOptions{File: f.ConfigFile}
	return &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List the contexts of the config file",
		Example: `  protctl context ls
  protctl context ls -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Printer = f.Printer()
			return runContextList(opts)
		},
	}
}

func runContextList(opts *contextListOptions) error {
	file, path, err := opts.File()
	if err != nil {
		return err
	}
	items := make([]contextItem, 0, len(file.Contexts))
	for _, c := range file.Contexts {
		items = append(items, contextItemOf(c, file.CurrentContext))
	}
	yesNo := func(b bool) string {
		if b {
			return "yes"
		}
		return "no"
	}
	return opts.Printer.PrintList("Context", items, output.TableSpec{
		Empty: fmt.Sprintf("No contexts in %s.", path),
		Columns: []output.Column{
			output.Col("CURRENT", func(c contextItem) string {
				if c.Current {
					return "*"
				}
				return ""
			}),
			output.Col("NAME", func(c contextItem) string { return c.Name }),
			output.Col("REDIS", func(c contextItem) string { return orDash(c.Redis.URL) }),
			output.Col("LAYOUT", func(c contextItem) string { return c.Redis.Layout }),
			output.Col("KAFKA", func(c contextItem) string { return strings.Join(c.Kafka.Brokers, ",") }, output.WideOnly()),
			output.Col("CATEGORIES", func(c contextItem) string { return strings.Join(c.Categories, ",") }, output.WideOnly()),
			output.Col("READ-ONLY", func(c contextItem) string { return yesNo(c.ReadOnly) },
				output.Toned(func(c contextItem) output.Tone {
					if c.ReadOnly {
						return output.ToneGood
					}
					return output.ToneNone
				})),
			output.Col("PROTECTED", func(c contextItem) string { return yesNo(c.Protected) }),
		},
	})
}

// contextItemOf is a context as listed and as printed by add and set.
func contextItemOf(c config.Context, current string) contextItem {
	layout := c.Redis.Layout
	if layout == "" {
		layout = "protean"
	}
	var sentinel *config.RedisSentinel
	if c.Redis.Sentinel != (config.RedisSentinel{}) {
		sc := c.Redis.Sentinel
		sentinel = &sc
	}
	return contextItem{
		Name:    c.Name,
		Current: c.Name == current,
		Redis: contextRedis{
			URL:          redactedOrNull(c.Redis.URL),
			Layout:       layout,
			Username:     nonEmpty(c.Redis.Username),
			PasswordFile: nonEmpty(c.Redis.PasswordFile),
			Sentinel:     sentinel,
		},
		Kafka:      contextKafka{Brokers: append([]string{}, c.Kafka.Brokers...)},
		Categories: append([]string{}, c.Categories...),
		ReadOnly:   c.ReadOnly,
		Protected:  c.Protected,
	}
}

type contextUseOptions struct {
	IO   *output.IOStreams
	File func() (*config.File, string, error)
	Name string
}

func newContextUseCmd(f *Factory) *cobra.Command {
	opts := &contextUseOptions{IO: f.IOStreams, File: f.ConfigFile}
	return &cobra.Command{
		Use:   "use NAME",
		Short: "Make a context the default (the file's currentContext)",
		Long: `Make a context the default for later commands by setting currentContext in the
config file. This changes only the local file, so it is allowed in read-only
mode and needs no --yes.`,
		Example: `  protctl context use prod`,
		Args:    cobra.ExactArgs(1),
		ValidArgsFunction: func(cmd *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
			if len(args) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			return f.contextNames(), cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Name = args[0]
			return runContextUse(opts)
		},
	}
}

func runContextUse(opts *contextUseOptions) error {
	file, path, err := opts.File()
	if err != nil {
		return err
	}
	if _, err := file.Context(opts.Name); err != nil {
		return clierr.NotFound.Wrap(err)
	}
	file.CurrentContext = opts.Name
	if err := file.Save(path); err != nil {
		return err
	}
	_, err = fmt.Fprintf(opts.IO.ErrOut, "Switched to context %q.\n", opts.Name)
	return err
}

type contextCurrentOptions struct {
	Printer *output.Printer
	File    func() (*config.File, string, error)
}

func newContextCurrentCmd(f *Factory) *cobra.Command {
	opts := &contextCurrentOptions{File: f.ConfigFile}
	return &cobra.Command{
		Use:   "current",
		Short: "Print the name of the default context",
		Long: `Print the config file's currentContext. It exits 4 when none is set. (--context
and PROTCTL_CONTEXT override it for one command; "config view" shows the
context a command would use.)`,
		Example: `  protctl context current`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Printer = f.Printer()
			return runContextCurrent(opts)
		},
	}
}

func runContextCurrent(opts *contextCurrentOptions) error {
	file, path, err := opts.File()
	if err != nil {
		return err
	}
	if file.CurrentContext == "" {
		return clierr.NotFound.Errorf("no current context in %s", path)
	}
	obj := struct {
		Name string `json:"name"`
	}{file.CurrentContext}
	return opts.Printer.PrintObject("CurrentContext", obj, func(w io.Writer, _ output.Styles) error {
		_, err := fmt.Fprintln(w, output.Escape(file.CurrentContext))
		return err
	})
}

func redactedOrNull(u string) *string {
	if u == "" {
		return nil
	}
	r := config.RedactURL(u)
	return &r
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func orDash(s *string) string {
	if s == nil {
		return "-"
	}
	return *s
}
