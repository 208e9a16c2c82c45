package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/protctl/protctl/internal/buildinfo"
	"github.com/protctl/protctl/internal/clierr"
	"github.com/protctl/protctl/internal/config"
	"github.com/protctl/protctl/internal/output"
)

// Man pages are written from the command tree by a small roff generator
// of our own (the man(7) macros: TH, SH, PP, TP, RS/RE, nf/fi), so that
// release archives carry section 1 pages without a Markdown-to-roff
// dependency (cobra/doc would bring in go-md2man). One page per available
// command, named after its path (protctl-partitions-ls.1), as git and
// kubectl do.

type manOptions struct {
	IO      *output.IOStreams
	Root    *cobra.Command
	Dir     string
	Date    string
	Version string
}

func newManCmd(f *Factory) *cobra.Command {
	opts := &manOptions{IO: f.IOStreams}
	cmd := &cobra.Command{
		Use:    "man --dir DIR",
		Short:  "Generate the man pages (section 1) of every command",
		Hidden: true,
		Long: `Write one man page per command into DIR: protctl.1, protctl-partitions.1,
protctl-partitions-ls.1, and so on. The date in the pages' header is --date,
else SOURCE_DATE_EPOCH (for reproducible builds), else today.`,
		Example: `  # what make man and the release run
  go run ./cmd/protctl man --dir dist/manpages
  man -l dist/manpages/protctl-partitions-ls.1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Root = cmd.Root()
			if opts.Version == "" {
				opts.Version = buildinfo.Get().Version
			}
			date, err := manDate(opts.Date, f.Getenv("SOURCE_DATE_EPOCH"), f.Now)
			if err != nil {
				return usageError(err)
			}
			opts.Date = date
			return runMan(opts)
		},
	}
	cmd.Flags().StringVar(&opts.Dir, "dir", "", "directory to write the pages into (created if missing)")
	cmd.Flags().StringVar(&opts.Date, "date", "", "date in the pages' header: YYYY-MM-DD or RFC 3339")
	cmd.Flags().StringVar(&opts.Version, "version", "", "version in the pages' footer (default: this binary's)")
	_ = cmd.MarkFlagRequired("dir")
	_ = cmd.MarkFlagDirname("dir")
	return cmd
}

// manDate picks the header date: the flag, else SOURCE_DATE_EPOCH, else
// now, as YYYY-MM-DD in UTC.
func manDate(flag, epoch string, now func() time.Time) (string, error) {
	switch {
	case flag != "":
		if t, err := time.Parse(time.DateOnly, flag); err == nil {
			return t.Format(time.DateOnly), nil
		}
		t, err := time.Parse(time.RFC3339, flag)
		if err != nil {
			return "", fmt.Errorf("invalid --date %q: want YYYY-MM-DD or RFC 3339", flag)
		}
		return t.UTC().Format(time.DateOnly), nil
	case epoch != "":
		s, err := strconv.ParseInt(epoch, 10, 64)
		if err != nil {
			return "", fmt.Errorf("invalid SOURCE_DATE_EPOCH %q: want seconds since 1970", epoch)
		}
		return time.Unix(s, 0).UTC().Format(time.DateOnly), nil
	}
	return now().UTC().Format(time.DateOnly), nil
}

func runMan(opts *manOptions) error {
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return err
	}
	n := 0
	var walk func(c *cobra.Command) error
	walk = func(c *cobra.Command) error {
		var b bytes.Buffer
		writeManPage(&b, c, opts.Date, opts.Version)
		if err := os.WriteFile(filepath.Join(opts.Dir, manName(c)+".1"), b.Bytes(), 0o644); err != nil {
			return err
		}
		n++
		for _, sub := range c.Commands() {
			if sub.IsAvailableCommand() {
				if err := walk(sub); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(opts.Root); err != nil {
		return err
	}
	_, err := fmt.Fprintf(opts.IO.ErrOut, "wrote %d man pages to %s\n", n, opts.Dir)
	return err
}

// manName is the page name of c: its path joined with '-'.
func manName(c *cobra.Command) string { return strings.ReplaceAll(c.CommandPath(), " ", "-") }

// writeManPage renders c's page.
func writeManPage(b *bytes.Buffer, c *cobra.Command, date, version string) {
	name := manName(c)
	isRoot := !c.HasParent()
	fmt.Fprintf(b, ".\\\" Generated from the command tree by \"protctl man\"; do not edit.\n")
	// The date is YYYY-MM-DD (manDate): plain hyphens, as man pages date.
	fmt.Fprintf(b, ".TH %s 1 \"%s\" %s %s\n", roffQuote(strings.ToUpper(name)), date,
		roffQuote("protctl "+version), roffQuote("protctl Manual"))

	b.WriteString(".nh\n.ad l\n") // no hyphenation, ragged right: options and commands copy as typed
	b.WriteString(".SH NAME\n")
	fmt.Fprintf(b, "%s \\- %s\n", roffEscape(name), roffEscape(c.Short))

	b.WriteString(".SH SYNOPSIS\n")
	usage := c.UseLine()
	if c.HasAvailableSubCommands() {
		usage = c.CommandPath() + " COMMAND [flags]"
	}
	fmt.Fprintf(b, ".B %s\n", roffEscape(c.CommandPath()))
	if rest := strings.TrimSpace(strings.TrimPrefix(usage, c.CommandPath())); rest != "" {
		b.WriteString(roffEscape(rest) + "\n")
	}
	if len(c.Aliases) > 0 {
		b.WriteString(".PP\nAliases: " + roffEscape(strings.Join(c.Aliases, ", ")) + "\n")
	}

	b.WriteString(".SH DESCRIPTION\n")
	desc := c.Long
	if strings.TrimSpace(desc) == "" {
		desc = c.Short
	}
	writeRoffText(b, desc)

	if c.HasAvailableSubCommands() {
		b.WriteString(".SH COMMANDS\n")
		for _, sub := range c.Commands() {
			if !sub.IsAvailableCommand() {
				continue
			}
			fmt.Fprintf(b, ".TP\n.BR %s (1)\n%s\n", roffEscape(manName(sub)), roffEscape(sub.Short))
		}
	}

	writeManFlags(b, "OPTIONS", c.NonInheritedFlags())
	if !isRoot {
		writeManFlags(b, "GLOBAL OPTIONS", c.InheritedFlags())
	}

	if ex := strings.TrimRight(c.Example, " \n"); ex != "" {
		b.WriteString(".SH EXAMPLES\n")
		writeRoffPre(b, strings.Split(ex, "\n"))
	}

	if isRoot {
		b.WriteString(".SH EXIT STATUS\n")
		b.WriteString(".TP\n.B 0\nsuccess (a dry run that would apply cleanly included)\n")
		for _, k := range clierr.Kinds() {
			fmt.Fprintf(b, ".TP\n.B %d\n%s\n", k.Code, roffInlineCode(k.Meaning))
		}
		b.WriteString(".SH ENVIRONMENT\n")
		for _, e := range manEnvironment {
			fmt.Fprintf(b, ".TP\n.B %s\n%s\n", roffEscape(e[0]), roffEscape(e[1]))
		}
		b.WriteString(".SH FILES\n.TP\n.I $XDG_CONFIG_HOME/protctl/config.yaml\n")
		b.WriteString("the contexts file (else ~/.config/protctl/config.yaml)\n")
	}

	var see []string
	if c.HasParent() {
		see = append(see, manName(c.Parent()))
	}
	for _, sub := range c.Commands() {
		if sub.IsAvailableCommand() {
			see = append(see, manName(sub))
		}
	}
	if len(see) > 0 {
		b.WriteString(".SH SEE ALSO\n")
		for i, s := range see {
			sep := ","
			if i == len(see)-1 {
				sep = ""
			}
			fmt.Fprintf(b, ".BR %s (1)%s\n", roffEscape(s), sep)
		}
	}
}

// manEnvironment is the root page's ENVIRONMENT section.
var manEnvironment = [][2]string{
	{config.EnvRedis, "Redis URL, redis://, rediss://, unix:// or redis+sentinel:// (as --redis)"},
	{config.EnvRedisUsername, "Redis ACL user"},
	{config.EnvRedisPassword, "Redis password (never taken from the command line)"},
	{config.EnvRedisPasswordFile, "file holding the Redis password"},
	{config.EnvRedisTLSCA, "PEM file of the CA of the Redis server's certificate (as --redis-tls-ca)"},
	{config.EnvRedisTLSCert, "PEM file of the Redis TLS client certificate (as --redis-tls-cert)"},
	{config.EnvRedisTLSKey, "PEM file of the Redis TLS client key (as --redis-tls-key)"},
	{config.EnvLayout, "Redis key layout: protean or cluster (as --layout)"},
	{config.EnvKafka, "Kafka brokers, comma-separated (as --kafka)"},
	{config.EnvKafkaTLS, "true: TLS to Kafka with the system roots (as --kafka-tls)"},
	{config.EnvKafkaTLSCA, "PEM file of the CA of the Kafka brokers' certificates (as --kafka-tls-ca)"},
	{config.EnvKafkaTLSCert, "PEM file of the Kafka TLS client certificate (as --kafka-tls-cert)"},
	{config.EnvKafkaTLSKey, "PEM file of the Kafka TLS client key (as --kafka-tls-key)"},
	{config.EnvKafkaTLSServer, "server name to verify in the Kafka brokers' certificates"},
	{config.EnvKafkaMechanism, "Kafka SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (as --kafka-sasl-mechanism)"},
	{config.EnvKafkaUsername, "Kafka SASL user (as --kafka-username)"},
	{config.EnvKafkaPassword, "Kafka SASL password (never taken from the command line)"},
	{config.EnvKafkaPasswordFile, "file holding the Kafka SASL password"},
	{config.EnvContext, "context of the contexts file to use (as --context)"},
	{config.EnvConfig, "contexts file (as --config)"},
	{config.EnvReadOnly, "refuse every change (as --read-only)"},
	{"NO_COLOR", "no colour in tables, whatever the terminal"},
}

// writeManFlags renders a flag set as a TP list.
func writeManFlags(b *bytes.Buffer, title string, fs *pflag.FlagSet) {
	var flags []*pflag.Flag
	fs.VisitAll(func(f *pflag.Flag) {
		if !f.Hidden && f.Name != "help" {
			flags = append(flags, f)
		}
	})
	if len(flags) == 0 {
		return
	}
	b.WriteString(".SH " + title + "\n")
	for _, f := range flags {
		varname, usage := pflag.UnquoteUsage(f)
		b.WriteString(".TP\n")
		if f.Shorthand != "" {
			fmt.Fprintf(b, "\\fB\\-%s\\fR, ", roffEscape(f.Shorthand))
		}
		fmt.Fprintf(b, "\\fB\\-\\-%s\\fR", roffEscape(f.Name))
		if varname != "" {
			fmt.Fprintf(b, " \\fI%s\\fR", roffEscape(varname))
		}
		b.WriteString("\n" + roffEscape(usage))
		if d := f.DefValue; d != "" && d != "false" && d != "0" && d != "[]" && d != "0s" {
			if f.Value.Type() == "string" {
				d = strconv.Quote(d)
			}
			b.WriteString(" (default " + roffEscape(d) + ")")
		}
		b.WriteString("\n")
	}
}

// writeRoffText renders hand-wrapped help text: runs of unindented lines
// are filled paragraphs; runs of indented lines (commands, tables) are
// kept as written, indented.
func writeRoffText(b *bytes.Buffer, text string) {
	lines := strings.Split(strings.Trim(text, "\n"), "\n")
	for i := 0; i < len(lines); {
		switch {
		case strings.TrimSpace(lines[i]) == "":
			i++
		case isIndented(lines[i]):
			j := i
			for j < len(lines) && (isIndented(lines[j]) || strings.TrimSpace(lines[j]) == "" && j+1 < len(lines) && isIndented(lines[j+1])) {
				j++
			}
			writeRoffPre(b, lines[i:j])
			i = j
		default:
			b.WriteString(".PP\n")
			for ; i < len(lines) && strings.TrimSpace(lines[i]) != "" && !isIndented(lines[i]); i++ {
				b.WriteString(roffEscape(strings.TrimSpace(lines[i])) + "\n")
			}
		}
	}
}

func isIndented(line string) bool {
	return strings.HasPrefix(line, " ") || strings.HasPrefix(line, "\t")
}

// writeRoffPre renders lines without filling, their common indentation
// replaced by the page's.
func writeRoffPre(b *bytes.Buffer, lines []string) {
	indent := -1
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		n := len(l) - len(strings.TrimLeft(l, " \t"))
		if indent < 0 || n < indent {
			indent = n
		}
	}
	b.WriteString(".PP\n.RS 4\n.nf\n")
	for _, l := range lines {
		if len(l) >= indent && indent > 0 {
			l = l[indent:]
		}
		if strings.TrimSpace(l) == "" {
			b.WriteString("\n")
			continue
		}
		b.WriteString(roffEscape(strings.TrimRight(l, " ")) + "\n")
	}
	b.WriteString(".fi\n.RE\n")
}

// roffEscape makes s safe as roff text on a line of its own: backslashes
// and hyphens (so that options and commands copy as typed), and a
// leading '.' or apostrophe that roff would read as a request.
func roffEscape(s string) string {
	s = strings.ReplaceAll(s, `\`, `\e`)
	s = strings.ReplaceAll(s, "-", `\-`)
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		s = `\&` + s
	}
	return s
}

// roffQuote is a macro argument in double quotes.
func roffQuote(s string) string {
	return `"` + strings.ReplaceAll(roffEscape(s), `"`, `\(dq`) + `"`
}

// roffInlineCode renders `code` spans of Markdown text in bold.
func roffInlineCode(s string) string {
	parts := strings.Split(s, "`")
	var b strings.Builder
	for i, p := range parts {
		if i%2 == 1 {
			b.WriteString(`\fB` + strings.ReplaceAll(strings.ReplaceAll(p, `\`, `\e`), "-", `\-`) + `\fR`)
			continue
		}
		b.WriteString(strings.ReplaceAll(strings.ReplaceAll(p, `\`, `\e`), "-", `\-`))
	}
	out := b.String()
	if strings.HasPrefix(out, ".") || strings.HasPrefix(out, "'") {
		out = `\&` + out
	}
	return out
}
