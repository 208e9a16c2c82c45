package config

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/protctl/protctl/internal/redisconn"
)

// ErrInvalidField is returned (wrapped) by SetField for a field the
// contexts file does not have, a value that does not parse, or a password.
var ErrInvalidField = errors.New("invalid context field")

// contextField is one settable field of a context, named by its path in
// the file (redis.url, kafka.sasl.username, ...).
type contextField struct {
	path string
	kind string // "string", "list" or "bool"
	get  func(c *Context) any
}

func strField(path string, p func(c *Context) *string) contextField {
	return contextField{path, "string", func(c *Context) any { return p(c) }}
}

func boolField(path string, p func(c *Context) *bool) contextField {
	return contextField{path, "bool", func(c *Context) any { return p(c) }}
}

func listField(path string, p func(c *Context) *[]string) contextField {
	return contextField{path, "list", func(c *Context) any { return p(c) }}
}

// contextFields lists every field of Context but its name, in file order.
// There is deliberately no password field: passwords go in a
// passwordFile or PROTCTL_*_PASSWORD, never into the contexts file.
var contextFields = []contextField{
	strField("redis.url", func(c *Context) *string { return &c.Redis.URL }),
	strField("redis.layout", func(c *Context) *string { return &c.Redis.Layout }),
	strField("redis.username", func(c *Context) *string { return &c.Redis.Username }),
	strField("redis.passwordFile", func(c *Context) *string { return &c.Redis.PasswordFile }),
	strField("redis.tls.ca", func(c *Context) *string { return &c.Redis.TLS.CA }),
	strField("redis.tls.cert", func(c *Context) *string { return &c.Redis.TLS.Cert }),
	strField("redis.tls.key", func(c *Context) *string { return &c.Redis.TLS.Key }),
	strField("redis.sentinel.username", func(c *Context) *string { return &c.Redis.Sentinel.Username }),
	strField("redis.sentinel.passwordFile", func(c *Context) *string { return &c.Redis.Sentinel.PasswordFile }),
	listField("kafka.brokers", func(c *Context) *[]string { return &c.Kafka.Brokers }),
	boolField("kafka.tls.enabled", func(c *Context) *bool { return &c.Kafka.TLS.Enabled }),
	strField("kafka.tls.ca", func(c *Context) *string { return &c.Kafka.TLS.CA }),
	strField("kafka.tls.cert", func(c *Context) *string { return &c.Kafka.TLS.Cert }),
	strField("kafka.tls.key", func(c *Context) *string { return &c.Kafka.TLS.Key }),
	strField("kafka.tls.serverName", func(c *Context) *string { return &c.Kafka.TLS.ServerName }),
	boolField("kafka.tls.insecureSkipVerify", func(c *Context) *bool { return &c.Kafka.TLS.InsecureSkipVerify }),
	strField("kafka.sasl.mechanism", func(c *Context) *string { return &c.Kafka.SASL.Mechanism }),
	strField("kafka.sasl.username", func(c *Context) *string { return &c.Kafka.SASL.Username }),
	strField("kafka.sasl.passwordFile", func(c *Context) *string { return &c.Kafka.SASL.PasswordFile }),
	listField("categories", func(c *Context) *[]string { return &c.Categories }),
	boolField("readOnly", func(c *Context) *bool { return &c.ReadOnly }),
	boolField("protected", func(c *Context) *bool { return &c.Protected }),
}

// ContextFieldNames lists the fields SetField accepts, for help texts.
func ContextFieldNames() []string {
	names := make([]string, len(contextFields))
	for i, f := range contextFields {
		names[i] = f.path
	}
	return names
}

// SetField sets one field of c from its text form: a list is
// comma-separated, a bool is true or false, and an empty value clears the
// field. A Redis URL must pass CheckRedisURL: no password (it would be in
// clear in the file).
func (c *Context) SetField(path, value string) error {
	i := slices.IndexFunc(contextFields, func(f contextField) bool { return f.path == path })
	if i < 0 {
		if strings.Contains(strings.ToLower(path), "password") {
			return fmt.Errorf("%w %q: passwords are never stored in the contexts file; set redis.passwordFile, redis.sentinel.passwordFile or kafka.sasl.passwordFile, or %s / %s / %s",
				ErrInvalidField, path, EnvRedisPassword, EnvRedisSentinelPassword, EnvKafkaPassword)
		}
		return fmt.Errorf("%w %q: want one of %s", ErrInvalidField, path, strings.Join(ContextFieldNames(), ", "))
	}
	f := contextFields[i]
	value = strings.TrimSpace(value)
	switch p := f.get(c).(type) {
	case *string:
		if err := checkValue(f.path, value); err != nil {
			return err
		}
		*p = value
	case *[]string:
		*p = splitList(value)
	case *bool:
		if value == "" {
			*p = false
			return nil
		}
		b, err := strconv.ParseBool(value)
		if err != nil {
			return fmt.Errorf("%w %s=%q: want true or false", ErrInvalidField, f.path, value)
		}
		*p = b
	}
	return nil
}

func checkValue(path, value string) error {
	if value == "" {
		return nil
	}
	switch path {
	case "redis.url":
		return CheckRedisURL(value)
	case "redis.layout":
		if value != "protean" && value != "cluster" {
			return fmt.Errorf("%w redis.layout=%q: want protean or cluster", ErrInvalidField, value)
		}
	}
	return nil
}

// CheckRedisURL accepts the Redis URLs a contexts file may store: any
// URL redisconn.Check accepts (redis://, rediss://, unix://,
// redis+sentinel://, rediss+sentinel://; the check --redis, PROTCTL_REDIS
// and a file written by hand get too), without a password.
func CheckRedisURL(raw string) error {
	if err := redisconn.Check(raw, false); err != nil {
		return fmt.Errorf("%w redis.url: %w", ErrInvalidField, err)
	}
	if urlHasPassword(raw) {
		return fmt.Errorf("%w redis.url=%s: a password in the URL would be stored in clear; put it in a file named by redis.passwordFile (or set %s)",
			ErrInvalidField, RedactURL(raw), EnvRedisPassword)
	}
	return nil
}

// urlHasPassword reports whether a Redis URL (Sentinel or not) that
// redisconn.Check accepted holds a password.
func urlHasPassword(raw string) bool {
	if redisconn.IsSentinelURL(raw) {
		su, err := redisconn.ParseSentinelURL(raw)
		if err != nil || su.User == nil {
			return false
		}
		_, ok := su.User.Password()
		return ok
	}
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return false
	}
	_, ok := u.User.Password()
	return ok
}

// Validate checks what Load would check of the file, so that a change
// is refused before it is written.
func (f *File) Validate() error { return f.validate() }

// RemoveContext deletes the named context; it reports whether it existed.
func (f *File) RemoveContext(name string) bool {
	n := len(f.Contexts)
	f.Contexts = slices.DeleteFunc(f.Contexts, func(c Context) bool { return c.Name == name })
	return len(f.Contexts) != n
}

// marshalKeepingComments encodes f, reusing the nodes of the file as it
// was loaded (f.raw) wherever the value did not change, so that the
// comments on the top level and on contexts that were not edited survive.
// Comments inside an edited context are lost (it is encoded afresh).
func (f *File) marshalKeepingComments() ([]byte, error) {
	var fresh yaml.Node
	if err := fresh.Encode(f); err != nil {
		return nil, err
	}
	if f.raw == nil || len(f.raw.Content) != 1 || f.raw.Content[0].Kind != yaml.MappingNode {
		return encodeYAML(&fresh)
	}
	old := f.raw.Content[0]
	oldContexts := map[string]*yaml.Node{}
	if seq := mappingValue(old, "contexts"); seq != nil && seq.Kind == yaml.SequenceNode {
		for _, n := range seq.Content {
			var c Context
			if n.Decode(&c) == nil {
				oldContexts[c.Name] = n
			}
		}
	}
	// Keep the old top-level mapping's comments and key order: replace
	// its values with the fresh ones, add new keys, drop removed ones.
	out := &yaml.Node{Kind: yaml.MappingNode, Tag: old.Tag, Style: old.Style,
		HeadComment: old.HeadComment, LineComment: old.LineComment, FootComment: old.FootComment}
	orphan := "" // the head comment of a dropped key (the file's first comment, often)
	for i := 0; i+1 < len(old.Content); i += 2 {
		k := old.Content[i]
		v := mappingValue(&fresh, k.Value)
		if v == nil {
			orphan = strings.TrimSpace(orphan + "\n" + k.HeadComment)
			continue
		}
		if orphan != "" {
			k.HeadComment = strings.TrimSpace(orphan + "\n" + k.HeadComment)
			orphan = ""
		}
		out.Content = append(out.Content, k, keepComments(v, old.Content[i+1]))
	}
	for i := 0; i+1 < len(fresh.Content); i += 2 {
		if mappingValue(old, fresh.Content[i].Value) == nil {
			out.Content = append(out.Content, fresh.Content[i], fresh.Content[i+1])
		}
	}
	if seq := mappingValue(out, "contexts"); seq != nil {
		for i, n := range seq.Content {
			var c Context
			// An unchanged context keeps its old node (and comments).
			if n.Decode(&c) == nil {
				if o, ok := oldContexts[c.Name]; ok && reflect.DeepEqual(f.loaded[c.Name], c) {
					seq.Content[i] = o
				}
			}
		}
	}
	doc := &yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{out},
		HeadComment: f.raw.HeadComment, FootComment: f.raw.FootComment}
	return encodeYAML(doc)
}

func encodeYAML(n *yaml.Node) ([]byte, error) {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(n); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func keepComments(fresh, old *yaml.Node) *yaml.Node {
	fresh.HeadComment, fresh.LineComment, fresh.FootComment = old.HeadComment, old.LineComment, old.FootComment
	if fresh.Kind == yaml.SequenceNode && old.Kind == yaml.SequenceNode {
		fresh.Style = old.Style
	}
	return fresh
}

func mappingValue(m *yaml.Node, key string) *yaml.Node {
	if m.Kind == yaml.DocumentNode && len(m.Content) == 1 {
		m = m.Content[0]
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}
