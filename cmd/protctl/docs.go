package main

import (
	"bytes"
	_ "embed"
	"fmt"
	"os"
	"strings"
	"text/template"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/protctl/protctl/internal/clierr"
	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/output"
)

// cliDocTemplate is docs/cli.md's hand-written part (conventions, exit
// codes) with the places where the generated reference goes.
//
//go:embed cli.md.tmpl
var cliDocTemplate string

type docsOptions struct {
	IO     *output.IOStreams
	Root   *cobra.Command
	Output string
}

func newDocsCmd(f *Factory) *cobra.Command {
	opts := &docsOptions{IO: f.IOStreams}
	cmd := &cobra.Command{
		Use:    "docs",
		Short:  "Generate docs/cli.md, the command line reference",
		Hidden: true,
		Example: `  # what make docs runs
  go run ./cmd/protctl docs --file docs/cli.md`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Root = cmd.Root()
			return runDocs(opts)
		},
	}
	cmd.Flags().StringVar(&opts.Output, "file", "", "write to this file instead of stdout")
	return cmd
}

func runDocs(opts *docsOptions) error {
	var b bytes.Buffer
	if err := writeCLIDoc(&b, opts.Root); err != nil {
		return err
	}
	if opts.Output == "" {
		_, err := opts.IO.Out.Write(b.Bytes())
		return err
	}
	return os.WriteFile(opts.Output, b.Bytes(), 0o644)
}

// docCommand is one command of the reference.
type docCommand struct {
	Path    string
	Anchor  string
	Short   string
	Long    string
	Usage   string
	Aliases string
	Example string
	Flags   string
	Subs    []docCommand // direct subcommands, for the group's list
}

// writeCLIDoc renders the reference: the template's hand-written text,
// the global flags, the exit codes from clierr, and every available
// command, depth first in the order help lists them.
func writeCLIDoc(w *bytes.Buffer, root *cobra.Command) error {
	tmpl, err := template.New("cli.md").Parse(cliDocTemplate)
	if err != nil {
		return fmt.Errorf("docs template: %w", err)
	}
	var cmds []docCommand
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c != root {
			cmds = append(cmds, describe(c))
		}
		for _, sub := range c.Commands() {
			if sub.IsAvailableCommand() {
				walk(sub)
			}
		}
	}
	walk(root)
	return tmpl.Execute(w, map[string]any{
		"Root":        describe(root),
		"GlobalFlags": flagUsages(root.PersistentFlags()),
		"ExitCodes":   clierr.Kinds(),
		// The tables of states come from inspect's lists, so that the
		// reference cannot drift from the words the commands print.
		"LeaseStates":   inspect.LeaseStates(),
		"VerdictStates": inspect.VerdictStates(),
		"Statuses":      inspect.Statuses(),
		"Commands":      cmds,
	})
}

func describe(c *cobra.Command) docCommand {
	d := docCommand{
		Path:    c.CommandPath(),
		Anchor:  strings.ReplaceAll(c.CommandPath(), " ", "-"),
		Short:   c.Short,
		Long:    strings.TrimSpace(c.Long),
		Example: strings.TrimRight(c.Example, "\n "),
		Aliases: strings.Join(c.Aliases, ", "),
		Flags:   flagUsages(c.NonInheritedFlags()),
	}
	switch {
	case c.HasAvailableSubCommands():
		d.Usage = c.CommandPath() + " [command]"
	default:
		d.Usage = c.UseLine()
	}
	for _, sub := range c.Commands() {
		if sub.IsAvailableCommand() {
			d.Subs = append(d.Subs, docCommand{
				Path:   sub.CommandPath(),
				Anchor: strings.ReplaceAll(sub.CommandPath(), " ", "-"),
				Short:  sub.Short,
			})
		}
	}
	return d
}

func flagUsages(fs *pflag.FlagSet) string {
	var visible []*pflag.Flag
	fs.VisitAll(func(f *pflag.Flag) {
		if !f.Hidden && f.Name != "help" {
			visible = append(visible, f)
		}
	})
	if len(visible) == 0 {
		return ""
	}
	clean := pflag.NewFlagSet("doc", pflag.ContinueOnError)
	for _, f := range visible {
		clean.AddFlag(f)
	}
	return strings.TrimRight(clean.FlagUsagesWrapped(0), "\n")
}
