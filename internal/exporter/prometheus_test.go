package exporter_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/protctl/protctl/internal/exporter"
	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
)

// rulesDir is the shipped rules (deploy/prometheus).
var rulesDir = filepath.Join("..", "..", "deploy", "prometheus")

// tool finds a binary of Debian's prometheus package; scripts/test
// installs it, so a missing one is a broken environment, not a skip.
func tool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not found (apt-get install prometheus; scripts/test installs it): %v", name, err)
	}
	return p
}

func promtool(t *testing.T, stdin []byte, args ...string) string {
	t.Helper()
	cmd := exec.Command(tool(t, "promtool"), args...)
	cmd.Dir = rulesDir
	cmd.Stdin = bytes.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestShippedRules: promtool check rules and promtool test rules on
// deploy/prometheus, and promtool check metrics on a real scrape.
func TestShippedRules(t *testing.T) {
	promtool(t, nil, "check", "rules", "rules.yaml")
	out := promtool(t, nil, "test", "rules", "rules_test.yaml")
	if !strings.Contains(out, "SUCCESS") {
		t.Fatalf("promtool test rules: %s", out)
	}

	c := testenv.StartRedis(t).Client(t)
	bulkPartitions(t, c, "shop::order", "app.Projector", 50, 5)
	col, url := startExporter(t, exporter.Source{Inspector: inspect.New(c, broker.ProteanLayout)},
		exporter.Config{Categories: []string{"shop::order"}, Interval: time.Hour})
	testenv.Eventually(t, 30*time.Second, "first collection", func() (bool, string) {
		return !col.Snapshot().At.IsZero(), fmt.Sprint(col.Snapshot().Errors)
	})
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	// check metrics lints names, help and units; it exits non-zero on a
	// problem, which promtool() reports.
	promtool(t, body, "check", "metrics")
}

// TestPrometheusFiresHaltedAlert runs a real prometheus on loopback (a
// free port, a temporary directory) scraping the exporter every second
// with the shipped rules, and waits until its HTTP API reports
// ProtctlPartitionHalted firing for a halted partition. The rules' "for"
// durations are set to 0s in the copy Prometheus loads, so the test
// waits for scrapes and evaluations, not for the minute the shipped
// rule waits; the expressions are the shipped ones.
func TestPrometheusFiresHaltedAlert(t *testing.T) {
	bin := tool(t, "prometheus")
	c := testenv.StartRedis(t).Client(t)
	f := testenv.Protean(t, c)
	f.Category("shop::order").Partition("o-1").Entries(3).Group("app.Projector").
		Lease("worker-1", 2, time.Minute).Read(1).Deliveries(3, time.Second)
	_, metricsURL := startExporter(t, exporter.Source{Inspector: inspect.New(c, broker.ProteanLayout)},
		exporter.Config{Categories: []string{"shop::*"}, Interval: 500 * time.Millisecond})
	target := strings.TrimSuffix(strings.TrimPrefix(metricsURL, "http://"), "/metrics")

	dir := t.TempDir()
	rules, err := os.ReadFile(filepath.Join(rulesDir, "rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	rules = regexp.MustCompile(`(?m)^(\s+for:) \S+$`).ReplaceAll(rules, []byte("$1 0s"))
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), rules, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [rules.yaml]
scrape_configs:
  - job_name: protctl
    static_configs:
      - targets: [%q]
`, target)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	if port == 9090 {
		t.Fatal("free port 9090: the test never uses Prometheus's default port")
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	var log bytes.Buffer
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr)
	cmd.Stdout, cmd.Stderr = &log, &log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	type alerts struct {
		Data struct {
			Alerts []struct {
				Labels map[string]string `json:"labels"`
				State  string            `json:"state"`
			} `json:"alerts"`
		} `json:"data"`
	}
	testenv.Eventually(t, 90*time.Second, "ProtctlPartitionHalted firing in Prometheus", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/api/v1/alerts", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		var a alerts
		b, _ := io.ReadAll(resp.Body)
		if err := json.Unmarshal(b, &a); err != nil {
			return false, string(b)
		}
		for _, al := range a.Data.Alerts {
			if al.Labels["alertname"] == "ProtctlPartitionHalted" && al.State == "firing" &&
				al.Labels["scope"] == "shop::order" && al.Labels["group"] == "app.Projector" {
				return true, ""
			}
		}
		return false, string(b)
	})
}

// TestDashboardQueriesUseExportedFamilies: every metric the Grafana
// dashboard queries is one the exporter serves (a renamed family would
// leave an empty panel).
func TestDashboardQueriesUseExportedFamilies(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "grafana", "protctl.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("dashboard is not JSON: %v", err)
	}
	c := testenv.StartRedis(t).Client(t)
	bulkPartitions(t, c, "shop::order", "g", 3, 1)
	col, url := startExporter(t, exporter.Source{Inspector: inspect.New(c, broker.ProteanLayout)},
		exporter.Config{Categories: []string{"shop::order"}, Interval: time.Hour})
	testenv.Eventually(t, 30*time.Second, "first collection", func() (bool, string) {
		return !col.Snapshot().At.IsZero(), ""
	})
	fams := scrape(t, url)
	name := regexp.MustCompile(`\bprotctl_[a-z_]+`)
	n := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, m := range name.FindAllString(tg.Expr, -1) {
				n++
				if fams[m] == nil {
					t.Errorf("panel %q queries %s, which the exporter does not serve", p.Title, m)
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no protctl_ metric in the dashboard")
	}
}
