package main

import (
	"io"

	"github.com/spf13/cobra"

	"github.com/protctl/protctl/internal/buildinfo"
	"github.com/protctl/protctl/internal/output"
)

type versionOptions struct {
	Printer *output.Printer
	Info    func() buildinfo.Info
}

func newVersionCmd(f *Factory) *cobra.Command {
	opts := &versionOptions{Info: buildinfo.Get}
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit and build date of protctl",
		Long: `Print the version, commit and build date of this binary, the Go version it was
built with, and its platform. Release builds carry the values the linker set;
other builds show what the Go toolchain recorded (commit and date are null when
unknown).`,
		Example: `  protctl version
  protctl version -o json
  protctl version -o yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Printer = f.Printer()
			return runVersion(opts)
		},
	}
}

func runVersion(opts *versionOptions) error {
	info := opts.Info()
	return opts.Printer.PrintObject("Version", info, func(w io.Writer, st output.Styles) error {
		return output.WriteFields(w, st,
			output.Field{Label: "Version", Value: info.Version},
			output.Field{Label: "Commit", Value: orUnknown(info.Commit)},
			output.Field{Label: "Built", Value: orUnknown(info.Date)},
			output.Field{Label: "Go version", Value: info.GoVersion},
			output.Field{Label: "Platform", Value: info.Platform},
		)
	})
}

func orUnknown(s *string) string {
	if s == nil {
		return "unknown"
	}
	return *s
}
