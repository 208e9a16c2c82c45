// Package output is how every protctl command talks to the terminal: an
// IOStreams value that knows whether stdin and stdout are terminals,
// whether colour is wanted and how wide the terminal is, and a Printer that
// renders what a command found in the format the user chose (-o table,
// wide, json, jsonl or yaml).
//
// Commands never write to os.Stdout or check isatty themselves; they take
// an *IOStreams (tests build one with Test and force the TTY flags) and a
// *Printer. The JSON shapes follow docs/cli.md: lists are
//
//	{"apiVersion":"protctl.dev/v1","kind":"PartitionList","items":[...]}
//
// single objects carry apiVersion and kind beside their own fields, jsonl
// prints one item per line, and yaml is the JSON document in YAML syntax
// (commands tag their types for encoding/json only). Field values follow
// the contract's conventions: lowerCamelCase names, times as RFC 3339 UTC
// strings (Timestamp), durations as integer milliseconds in fields ending
// in Ms, Redis ids and offsets as strings, unknown as null.
//
// Tables are plain aligned text without colour, styled with lipgloss when
// colour is on (a TTY without NO_COLOR, or --color always). Cell text is
// data from Redis and is escaped: control characters never reach the
// terminal.
package output
