package inspect

import (
	"context"
	"slices"
	"strings"
)

// Service is a service found in Redis (`nodes ls` and `topics ls`
// without --service): by its nodes' status records and membership set
// (protctl:{S}:members, protctl:{S}:node:*) or its Kafka lease groups
// (protctl:{S|topic:T}:*).
type Service struct {
	Name string `json:"name"`
	// Nodes is true when a membership set or a node status record exists
	// (the live nodes are what Nodes reads).
	Nodes bool `json:"nodes"`
	// Topics are the service's Kafka topics with lease-group keys, sorted.
	Topics []string `json:"topics"`
}

// Services finds every service by one paced SCAN of protctl:{*}:*,
// sorted by name.
func (in *Inspector) Services(ctx context.Context, opts ScanOptions) ([]Service, error) {
	const pre = "protctl:{"
	found := map[string]*Service{}
	err := in.scanKeys(ctx, pre+"*}:*", "", opts, func(key string) bool {
		rest, ok := strings.CutPrefix(key, pre)
		if !ok {
			return false
		}
		tag, kind, ok := strings.Cut(rest, "}:")
		if !ok || tag == "" {
			return false
		}
		name, group, grouped := strings.Cut(tag, "|")
		s := found[name]
		if s == nil {
			s = &Service{Name: name, Topics: []string{}}
			found[name] = s
		}
		switch {
		case grouped:
			if t, ok := strings.CutPrefix(group, "topic:"); ok && !slices.Contains(s.Topics, t) {
				s.Topics = append(s.Topics, t)
			}
		case kind == "members" || strings.HasPrefix(kind, "node:"):
			s.Nodes = true
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	out := make([]Service, 0, len(found))
	for _, s := range found {
		slices.Sort(s.Topics)
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b Service) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}
