package nodeconfig

import (
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// decoder turns a YAML document into a Config by walking the node tree
// with the Config's types, so that every problem (an unknown field, a
// value of the wrong type, a duplicate key) is reported with the field's
// path and line, which yaml.v3's KnownFields mode does not give. It goes
// on after a problem to report as many as it can at once.
type decoder struct {
	problems []Problem
	// lines maps each decoded field's path to its line, for the problems
	// the validator finds later.
	lines map[string]int
}

var durationType = reflect.TypeFor[Duration]()

func (d *decoder) add(path string, line int, format string, a ...any) {
	d.problems = append(d.problems, Problem{Field: path, Line: line, Msg: fmt.Sprintf(format, a...)})
}

// decodeDocument decodes data into c; false when there was no document
// to decode (invalid YAML, or empty), so that nothing can be validated.
func (d *decoder) decodeDocument(data []byte, c *Config) bool {
	d.lines = map[string]int{}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		line, msg := yamlErrorLine(err)
		d.problems = append(d.problems, Problem{Line: line, Msg: msg})
		return false
	}
	if doc.Kind == 0 || len(doc.Content) == 0 || doc.Content[0].Tag == "!!null" {
		d.add("", 0, "the config is empty")
		return false
	}
	if doc.Content[0].Kind != yaml.MappingNode {
		d.add("", doc.Content[0].Line, "want a mapping of fields (service, redis, subscriptions, ...), got %s", kindName(doc.Content[0]))
		return false
	}
	d.decode(doc.Content[0], reflect.ValueOf(c).Elem(), "")
	return true
}

// suppressed reports whether a problem the validator found is about a
// field the decoder already reported, so that the validator's word on it
// would be a repeat or wrong (the decoder left the field zero): the same
// field or one inside it; for a misspelt name, the field it was probably
// meant to be, one inside that, or a problem of the enclosing mapping
// that names it ("exactly one of exec, http, log" after "exce").
func (d *decoder) suppressed(v Problem) bool {
	for _, p := range d.problems {
		if p.Field != "" && (v.Field == p.Field || within(v.Field, p.Field)) {
			return true
		}
		if p.meant == "" {
			continue
		}
		if v.Field == p.meant || within(v.Field, p.meant) {
			return true
		}
		name := p.meant[strings.LastIndexByte(p.meant, '.')+1:]
		if within(p.meant, v.Field) && !strings.ContainsAny(p.meant[len(v.Field)+1:], ".[") && mentions(v.Msg, name) {
			return true
		}
	}
	return false
}

// mentions reports whether msg has word as a whole word.
func mentions(msg, word string) bool {
	for _, w := range strings.FieldsFunc(msg, func(r rune) bool { return r == ' ' || r == ',' || r == ':' }) {
		if w == word {
			return true
		}
	}
	return false
}

// within reports whether path is a field inside parent.
func within(path, parent string) bool {
	rest, ok := strings.CutPrefix(path, parent)
	return ok && rest != "" && (rest[0] == '.' || rest[0] == '[')
}

// yamlErrorLine extracts "line N" from a yaml.v3 syntax error.
func yamlErrorLine(err error) (int, string) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if i := strings.Index(rest, ": "); i > 0 {
			if n, err := strconv.Atoi(rest[:i]); err == nil {
				return n, "invalid YAML: " + rest[i+2:]
			}
		}
	}
	return 0, "invalid YAML: " + msg
}

func join(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

func (d *decoder) decode(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if v.Type() == durationType {
		d.decodeDuration(n, v, path)
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		// A present key allocates, even with an empty value ("log:" or
		// "log: {}"), so that presence can be checked.
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		if isNull(n) {
			return
		}
		d.decode(n, v.Elem(), path)
	case reflect.Struct:
		d.decodeStruct(n, v, path)
	case reflect.Slice:
		d.decodeSlice(n, v, path)
	case reflect.Map:
		d.decodeMap(n, v, path)
	case reflect.String:
		if s, ok := d.scalar(n, path, "a string"); ok {
			v.SetString(s)
		}
	case reflect.Int:
		s, ok := d.scalar(n, path, "an integer")
		if !ok {
			return
		}
		i, err := strconv.Atoi(s)
		if err != nil || n.Tag != "!!int" {
			d.add(path, n.Line, "want an integer, got %q", s)
			return
		}
		v.SetInt(int64(i))
	case reflect.Bool:
		s, ok := d.scalar(n, path, "true or false")
		if !ok {
			return
		}
		if n.Tag != "!!bool" {
			d.add(path, n.Line, "want true or false, got %q", s)
			return
		}
		v.SetBool(s == "true" || s == "True" || s == "TRUE")
	default:
		panic("nodeconfig: unsupported field kind " + v.Kind().String())
	}
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if isNull(n) {
			return "nothing"
		}
		return fmt.Sprintf("%q", n.Value)
	}
	return "something else"
}

// scalar returns n's value when it is a scalar. A null is "" without a
// problem for strings (an empty value).
func (d *decoder) scalar(n *yaml.Node, path, want string) (string, bool) {
	if n.Kind != yaml.ScalarNode {
		d.add(path, n.Line, "want %s, got %s", want, kindName(n))
		return "", false
	}
	if isNull(n) {
		return "", false
	}
	return n.Value, true
}

func (d *decoder) decodeDuration(n *yaml.Node, v reflect.Value, path string) {
	s, ok := d.scalar(n, path, "a duration such as 15s")
	if !ok {
		return
	}
	dur, err := time.ParseDuration(s)
	if err != nil || n.Tag != "!!str" {
		d.add(path, n.Line, "want a duration such as 15s or 200ms, got %q", s)
		return
	}
	if dur < 0 {
		d.add(path, n.Line, "must not be negative, got %s", s)
		return
	}
	v.SetInt(int64(dur))
}

// fieldsOf maps the yaml names of t's fields to their indexes.
func fieldsOf(t reflect.Type) (map[string]int, []string) {
	m := map[string]int{}
	var names []string
	for i := range t.NumField() {
		tag, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",") // "name,omitempty" is "name"
		if tag == "" || tag == "-" {
			continue
		}
		m[tag] = i
		names = append(names, tag)
	}
	return m, names
}

func (d *decoder) decodeStruct(n *yaml.Node, v reflect.Value, path string) {
	if isNull(n) {
		return
	}
	if n.Kind != yaml.MappingNode {
		d.add(path, n.Line, "want a mapping of fields, got %s", kindName(n))
		return
	}
	fields, names := fieldsOf(v.Type())
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		name := k.Value
		fp := join(path, name)
		if k.Kind != yaml.ScalarNode {
			d.add(path, k.Line, "field names must be strings")
			continue
		}
		idx, ok := fields[name]
		if !ok {
			msg := "unknown field"
			s := suggest(name, names)
			if s != "" {
				msg += fmt.Sprintf(" (did you mean %s?)", s)
			} else {
				sorted := append([]string(nil), names...)
				sort.Strings(sorted)
				msg += "; known fields: " + strings.Join(sorted, ", ")
			}
			d.add(fp, k.Line, "%s", msg)
			if s != "" {
				d.problems[len(d.problems)-1].meant = join(path, s)
			}
			continue
		}
		if seen[name] {
			d.add(fp, k.Line, "set twice")
			continue
		}
		seen[name] = true
		d.lines[fp] = k.Line
		d.decode(val, v.Field(idx), fp)
	}
}

func (d *decoder) decodeSlice(n *yaml.Node, v reflect.Value, path string) {
	if isNull(n) {
		return
	}
	if n.Kind != yaml.SequenceNode {
		d.add(path, n.Line, "want a list, got %s", kindName(n))
		return
	}
	s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	for i, item := range n.Content {
		ip := fmt.Sprintf("%s[%d]", path, i)
		d.lines[ip] = item.Line
		d.decode(item, s.Index(i), ip)
	}
	v.Set(s)
}

func (d *decoder) decodeMap(n *yaml.Node, v reflect.Value, path string) {
	if isNull(n) {
		return
	}
	if n.Kind != yaml.MappingNode {
		d.add(path, n.Line, "want a mapping, got %s", kindName(n))
		return
	}
	m := reflect.MakeMapWithSize(v.Type(), len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		fp := join(path, k.Value)
		if k.Kind != yaml.ScalarNode {
			d.add(path, k.Line, "keys must be strings")
			continue
		}
		if m.MapIndex(reflect.ValueOf(k.Value)).IsValid() {
			d.add(fp, k.Line, "set twice")
			continue
		}
		elem := reflect.New(v.Type().Elem()).Elem()
		d.lines[fp] = k.Line
		d.decode(val, elem, fp)
		m.SetMapIndex(reflect.ValueOf(k.Value), elem)
	}
	v.Set(m)
}

// suggest returns the known name closest to name when it is close enough
// to be a typo (case differences, or an edit distance of at most 2).
func suggest(name string, known []string) string {
	best, bestD := "", 3
	for _, k := range known {
		if strings.EqualFold(k, name) {
			return k
		}
		if dd := distance(strings.ToLower(name), strings.ToLower(k)); dd < bestD {
			best, bestD = k, dd
		}
	}
	return best
}

// distance is the Levenshtein distance of a and b.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
