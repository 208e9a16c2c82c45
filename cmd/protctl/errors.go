package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/protctl/protctl/internal/clierr"
	"github.com/protctl/protctl/internal/output"
)

// printError reports err on stderr: one JSON object in -o json and jsonl
// mode ({"error":{"code":"CONFLICT","message":"...","exitCode":5}}),
// otherwise "protctl: message", with a pointer to --help after an error in
// the command line.
func printError(ios *output.IOStreams, cmd *cobra.Command, format string, kind clierr.Kind, err error) {
	if clierr.IsPermissionDenied(err) {
		err = permissionDenied{err}
	}
	msg := output.Escape(err.Error())
	if format == string(output.FormatJSON) || format == string(output.FormatJSONL) {
		enc := json.NewEncoder(ios.ErrOut)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(map[string]errorBody{"error": {
			Code:     string(kind),
			Message:  err.Error(),
			ExitCode: kind.ExitCode(),
		}})
		return
	}
	var ml multiLine
	if errors.As(err, &ml) {
		// Several problems (a node config's): one line each, every line
		// escaped on its own so that a control character still cannot
		// forge output, but the line breaks between them are kept.
		lines := strings.Split(err.Error(), "\n")
		for i := range lines {
			lines[i] = output.Escape(lines[i])
		}
		msg = strings.Join(lines, "\nprotctl: ")
	}
	fmt.Fprintf(ios.ErrOut, "protctl: %s\n", msg)
	var cle commandLineError
	if errors.As(err, &cle) && cmd != nil {
		fmt.Fprintf(ios.ErrOut, "Run '%s --help' for usage.\n", cmd.CommandPath())
	}
}

// multiLine is an error made of several problems, one per line
// (*nodeconfig.Error, run node's lineErrors): printError keeps its line
// breaks.
type multiLine interface {
	error
	Lines() []string
}

// permissionDenied is a Redis ACL denial, said so in words: the reply
// (NOPERM ...) names the command or that a key or channel was refused.
type permissionDenied struct{ error }

func (e permissionDenied) Error() string {
	return "permission denied: " + e.error.Error() +
		"; the Redis ACL user lacks a command, key or channel this needs" +
		" (protctl acl print --role readonly|operator|node prints the rules of each role)"
}

func (e permissionDenied) Unwrap() error { return e.error }

type errorBody struct {
	Code     string `json:"code"`
	Message  string `json:"message"`
	ExitCode int    `json:"exitCode"`
}

// errorFormat is the -o value in force: the parsed one, or when flag
// parsing failed before reaching -o, the one found in the raw arguments,
// so that a usage error of a JSON consumer is JSON too.
func (f *Factory) errorFormat(args []string) string {
	if f.changed("output") {
		return f.flags.output
	}
	return scanOutputFlag(args)
}

func scanOutputFlag(args []string) string {
	found := ""
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			i = len(args)
		case a == "-o" || a == "--output":
			if i+1 < len(args) {
				found = args[i+1]
				i++
			}
		case strings.HasPrefix(a, "--output="):
			found = strings.TrimPrefix(a, "--output=")
		case strings.HasPrefix(a, "-o="):
			found = strings.TrimPrefix(a, "-o=")
		case strings.HasPrefix(a, "-o") && !strings.HasPrefix(a, "--"):
			found = strings.TrimPrefix(a, "-o")
		}
	}
	return found
}
