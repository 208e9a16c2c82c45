package main

import (
	"github.com/spf13/cobra"

	"github.com/protctl/protctl/internal/clierr"
	"github.com/protctl/protctl/internal/output"
)

type completionOptions struct {
	IO    *output.IOStreams
	Root  *cobra.Command
	Shell string
}

func newCompletionCmd(f *Factory) *cobra.Command {
	opts := &completionOptions{IO: f.IOStreams}
	return &cobra.Command{
		Use:   "completion bash|zsh|fish|powershell",
		Short: "Generate the shell completion script",
		Long: `Generate the completion script of protctl for a shell. Completion covers
commands, flags and flag values (output formats, layouts, context names), and
the names read from Redis: categories, partition keys, consumer groups,
subscriptions, parked aggregates, streams, topics and services. Those are
looked up with the command line's settings (--redis, --context, the
environment) within one second; when Redis does not answer in time, nothing
is offered and the shell goes on.

bash (needs the bash-completion package):
  source <(protctl completion bash)                      # this shell only
  protctl completion bash > /etc/bash_completion.d/protctl

zsh:
  protctl completion zsh > "${fpath[1]}/_protctl"        # then start a new shell
  (run "autoload -U compinit; compinit" once if completion is not enabled)

fish:
  protctl completion fish > ~/.config/fish/completions/protctl.fish

PowerShell:
  protctl completion powershell | Out-String | Invoke-Expression`,
		Example: `  source <(protctl completion bash)
  protctl completion zsh > "${fpath[1]}/_protctl"
  protctl completion fish > ~/.config/fish/completions/protctl.fish`,
		ValidArgs:             []string{"bash", "zsh", "fish", "powershell"},
		Args:                  cobra.MatchAll(cobra.ExactArgs(1), cobra.OnlyValidArgs),
		DisableFlagsInUseLine: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Root = cmd.Root()
			opts.Shell = args[0]
			return runCompletion(opts)
		},
	}
}

func runCompletion(opts *completionOptions) error {
	w := opts.IO.Out
	switch opts.Shell {
	case "bash":
		return opts.Root.GenBashCompletionV2(w, true)
	case "zsh":
		return opts.Root.GenZshCompletion(w)
	case "fish":
		return opts.Root.GenFishCompletion(w, true)
	case "powershell":
		return opts.Root.GenPowerShellCompletionWithDesc(w)
	}
	return clierr.Usage.Errorf("unsupported shell %q: want bash, zsh, fish or powershell", opts.Shell)
}
