package runtime_test

import (
	"os/exec"
	"strings"
	"testing"
)

// A program that uses only the Redis engine (the root and
// pkg/runtime/partitioned, with the Redis adapters and stores) links no
// Kafka client: franz-go and its compression libraries come in only with
// pkg/runtime/topic. Before the split, handler.go imported kgo for
// Message.Headers and every user paid for it.
func TestRedisOnlyProgramLinksNoKafkaClient(t *testing.T) {
	for _, pkg := range []string{
		"github.com/protctl/protctl/pkg/runtime",
		"github.com/protctl/protctl/pkg/runtime/partitioned",
		"github.com/protctl/protctl/pkg/runtime/redisstore",
		"github.com/protctl/protctl/pkg/runtime/memstore",
		"github.com/protctl/protctl/pkg/broker/redisbroker",
	} {
		out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		deps := strings.Fields(string(out))
		if len(deps) < 5 {
			t.Fatalf("go list -deps %s listed only %v", pkg, deps)
		}
		for _, d := range deps {
			if strings.HasPrefix(d, "github.com/twmb/franz-go") {
				t.Errorf("%s links %s: a Redis-only program must not link a Kafka client", pkg, d)
			}
		}
	}
	// The check can fail: the Kafka engine does link franz-go.
	out, err := exec.Command("go", "list", "-deps", "github.com/protctl/protctl/pkg/runtime/topic").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps topic: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "github.com/twmb/franz-go/pkg/kgo") {
		t.Errorf("pkg/runtime/topic does not link franz-go: the check above would pass vacuously\n%s", out)
	}
}
