package main

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/protctl/protctl/internal/testenv"
)

// TestNodeConfigDocSubscriptionStates: the table of subscription states
// in docs/node-config.md (the state label of protctl_subscription_up and
// of /v1/status) has one row per runtime.SubscriptionState constant, in
// their order, each with a meaning: a state the runtime reports that the
// operator's table does not explain fails here.
func TestNodeConfigDocSubscriptionStates(t *testing.T) {
	enum := testenv.StringConsts(t, "../../pkg/runtime", "SubscriptionState")["SubscriptionState"]
	doc, err := os.ReadFile("../../docs/node-config.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "#### Subscription states")
	if !ok {
		t.Fatal("docs/node-config.md has no \"#### Subscription states\" section")
	}
	if i := strings.Index(section, "\n#"); i >= 0 {
		section = section[:i]
	}
	row := regexp.MustCompile("(?m)^\\| `([a-z]+)` \\| (.*) \\|$")
	var documented []string
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		documented = append(documented, m[1])
		if strings.TrimSpace(m[2]) == "" {
			t.Errorf("state %q has no meaning", m[1])
		}
	}
	if len(enum) == 0 || !slices.Equal(documented, enum) {
		t.Errorf("docs/node-config.md lists the states %q, the runtime declares %q", documented, enum)
	}
}
