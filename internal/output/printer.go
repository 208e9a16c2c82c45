package output

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// APIVersion is the apiVersion of every JSON and YAML document protctl
// prints. It changes only if a field changes incompatibly, which the
// contract forbids; fields are only ever added.
const APIVersion = "protctl.dev/v1"

// Format is the -o setting.
type Format string

// Output formats.
const (
	FormatTable Format = "table" // aligned columns for people
	FormatWide  Format = "wide"  // table plus the columns marked Wide
	FormatJSON  Format = "json"  // one indented document with an envelope
	FormatJSONL Format = "jsonl" // one compact item per line, no envelope
	FormatYAML  Format = "yaml"  // the JSON document in YAML syntax
)

// Formats lists the valid -o values, in the order help shows them.
func Formats() []Format {
	return []Format{FormatTable, FormatWide, FormatJSON, FormatJSONL, FormatYAML}
}

// ParseFormat validates an -o value; "" is table.
func ParseFormat(s string) (Format, error) {
	if s == "" {
		return FormatTable, nil
	}
	for _, f := range Formats() {
		if string(f) == s {
			return f, nil
		}
	}
	return "", fmt.Errorf("invalid output format %q: want one of table, wide, json, jsonl, yaml", s)
}

// Structured reports whether f is meant for programs (json, jsonl, yaml).
func (f Format) Structured() bool {
	return f == FormatJSON || f == FormatJSONL || f == FormatYAML
}

// PrinterOptions configure a Printer. The zero value prints tables with
// headers using the wall clock.
type PrinterOptions struct {
	Format    Format
	NoHeaders bool             // omit the header row of tables
	Now       func() time.Time // the clock for relative times; nil = time.Now
}

// Printer renders command results to an IOStreams' Out in the chosen
// format. One Printer serves one command invocation.
type Printer struct {
	ios       *IOStreams
	format    Format
	noHeaders bool
	now       func() time.Time
	styles    Styles
}

// NewPrinter returns a printer writing to ios.Out.
func NewPrinter(ios *IOStreams, opts PrinterOptions) *Printer {
	if opts.Format == "" {
		opts.Format = FormatTable
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Printer{
		ios:       ios,
		format:    opts.Format,
		noHeaders: opts.NoHeaders,
		now:       opts.Now,
		styles:    newStyles(ios.Out, ios.ColorEnabled()),
	}
}

// Format returns the output format.
func (p *Printer) Format() Format { return p.format }

// Structured reports whether the output is for programs (json, jsonl,
// yaml): commands then print nothing but the document to stdout.
func (p *Printer) Structured() bool { return p.format.Structured() }

// Styles are the styles for human output; no-ops without colour.
func (p *Printer) Styles() Styles { return p.styles }

// Time renders a time for a table cell: relative ("3m ago") when stdout is
// a terminal, RFC 3339 UTC to the second otherwise, "-" for the zero time.
func (p *Printer) Time(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	if p.ios.IsStdoutTTY() {
		return relativeTime(t, p.now())
	}
	return t.UTC().Format(time.RFC3339)
}

// Column is one column of a table. Build them with Col.
type Column struct {
	Header string                // upper case by convention, e.g. "KEY"
	Wide   bool                  // shown only with -o wide
	Value  func(item any) string // the cell text; escaped before printing
	Tone   func(item any) Tone   // optional colour by meaning
}

// ColumnOption adjusts a Column built by Col.
type ColumnOption func(*Column)

// WideOnly shows the column only with -o wide.
func WideOnly() ColumnOption { return func(c *Column) { c.Wide = true } }

// Toned colours the column's cells by tone(item) when colour is on.
func Toned[T any](tone func(T) Tone) ColumnOption {
	return func(c *Column) {
		c.Tone = func(item any) Tone { return tone(item.(T)) }
	}
}

// Col builds a column over items of type T, the element type of the slice
// given to PrintList:
//
//	output.Col("KEY", func(p inspect.Partition) string { return p.Key })
func Col[T any](header string, value func(T) string, opts ...ColumnOption) Column {
	c := Column{Header: header, Value: func(item any) string { return value(item.(T)) }}
	for _, o := range opts {
		o(&c)
	}
	return c
}

// TableSpec says how a list looks as a table.
type TableSpec struct {
	Columns []Column
	// Empty is said on stderr when a table would have no rows (stdout stays
	// empty). Default "No resources found.".
	Empty string
}

// View renders a single object for people (table and wide formats). The
// styles are no-ops when colour is off.
type View func(w io.Writer, st Styles) error

// PrintList prints items, a slice, as a list of kind (the item kind, e.g.
// "Partition"; the JSON envelope's kind is kind+"List"). In table formats
// spec gives the columns; structured formats marshal the items with
// encoding/json. A nil slice prints as an empty list.
func (p *Printer) PrintList(kind string, items any, spec TableSpec) error {
	list, err := sliceItems(items)
	if err != nil {
		return err
	}
	switch p.format {
	case FormatJSON, FormatYAML:
		if list == nil {
			list = []any{}
		}
		raw, err := marshal(struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Items      []any  `json:"items"`
		}{APIVersion, kind + "List", list})
		if err != nil {
			return fmt.Errorf("output: encoding %s list: %w", kind, err)
		}
		return p.writeDocument(raw)
	case FormatJSONL:
		enc := json.NewEncoder(p.ios.Out)
		enc.SetEscapeHTML(false)
		for _, it := range list {
			if err := enc.Encode(it); err != nil {
				return fmt.Errorf("output: encoding %s: %w", kind, err)
			}
		}
		return nil
	default:
		if len(list) == 0 {
			msg := spec.Empty
			if msg == "" {
				msg = "No resources found."
			}
			_, err := fmt.Fprintln(p.ios.ErrOut, msg)
			return err
		}
		return p.table(list, spec)
	}
}

// PrintObject prints one object of kind (e.g. "Version"). Structured
// formats print obj's JSON fields with apiVersion and kind in front (obj
// must marshal to a JSON object); jsonl prints that on one line. Table
// formats call view, or print the fields one per line when view is nil.
func (p *Printer) PrintObject(kind string, obj any, view View) error {
	if !p.format.Structured() {
		if view == nil {
			raw, err := marshal(obj)
			if err != nil {
				return fmt.Errorf("output: encoding %s: %w", kind, err)
			}
			return p.writeDocumentAs(FormatYAML, raw)
		}
		return view(p.ios.Out, p.styles)
	}
	raw, err := marshal(obj)
	if err != nil {
		return fmt.Errorf("output: encoding %s: %w", kind, err)
	}
	raw = bytes.TrimSpace(raw)
	if len(raw) < 2 || raw[0] != '{' {
		return fmt.Errorf("output: %s does not encode as a JSON object", kind)
	}
	var b bytes.Buffer
	b.WriteString(`{"apiVersion":`)
	b.WriteString(strconv.Quote(APIVersion))
	b.WriteString(`,"kind":`)
	kindJSON, _ := marshal(kind)
	b.Write(kindJSON)
	if rest := bytes.TrimSpace(raw[1:]); len(rest) > 0 && rest[0] != '}' {
		b.WriteByte(',')
	}
	b.Write(raw[1:])
	return p.writeDocument(b.Bytes())
}

// writeDocument prints one JSON document in the printer's format.
func (p *Printer) writeDocument(raw []byte) error { return p.writeDocumentAs(p.format, raw) }

func (p *Printer) writeDocumentAs(f Format, raw []byte) error {
	var out []byte
	switch f {
	case FormatYAML:
		y, err := jsonToYAML(raw)
		if err != nil {
			return err
		}
		out = y
	case FormatJSONL:
		var b bytes.Buffer
		if err := json.Compact(&b, raw); err != nil {
			return fmt.Errorf("output: %w", err)
		}
		b.WriteByte('\n')
		out = b.Bytes()
	default:
		var b bytes.Buffer
		if err := json.Indent(&b, raw, "", "  "); err != nil {
			return fmt.Errorf("output: %w", err)
		}
		b.WriteByte('\n')
		out = b.Bytes()
	}
	_, err := p.ios.Out.Write(out)
	return err
}

// marshal is json.Marshal without HTML escaping: "<nil>" in an error
// text stays readable in a terminal and means the same to a JSON parser.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// sliceItems turns a slice or array into its elements; nil for nil.
func sliceItems(items any) ([]any, error) {
	if items == nil {
		return nil, nil
	}
	v := reflect.ValueOf(items)
	if v.Kind() != reflect.Slice && v.Kind() != reflect.Array {
		return nil, fmt.Errorf("output: PrintList wants a slice, got %T", items)
	}
	if v.Kind() == reflect.Slice && v.IsNil() {
		return nil, nil
	}
	list := make([]any, v.Len())
	for i := range list {
		list[i] = v.Index(i).Interface()
	}
	return list, nil
}

// Field is one "Label: value" line of a detail view.
type Field struct {
	Label string
	Value string
	Tone  Tone
}

// WriteFields prints fields as aligned "Label:  value" lines, the labels
// bold when colour is on. Values are escaped like table cells.
func WriteFields(w io.Writer, st Styles, fields ...Field) error {
	width := 0
	for _, f := range fields {
		width = max(width, displayWidth(f.Label)+1)
	}
	var b strings.Builder
	for _, f := range fields {
		label := f.Label + ":"
		b.WriteString(st.Bold(label))
		b.WriteString(strings.Repeat(" ", width-displayWidth(label)+2))
		b.WriteString(st.Tone(f.Tone, Escape(f.Value)))
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}
