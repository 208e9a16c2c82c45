package main

import (
	"regexp"
	"strings"
	"testing"
)

// TestTablesOnATerminalAndWithout runs every read-only command's table in
// TTY mode (styled) and without a terminal (plain text, absolute times):
// both show the same rows, only the terminal gets ANSI escapes.
func TestTablesOnATerminalAndWithout(t *testing.T) {
	e := newOpsEnv(t)
	e.park()
	e.heartbeat()
	s := e.s
	cases := []struct {
		name string
		args []string
		code int
		want []string // in stdout, both modes
	}{
		{"partitions ls", []string{"partitions", "ls"}, 0, []string{"CATEGORY", s.Halted, s.Pay1, s.HaltedOwner, "expired"}},
		{"partitions ls wide", []string{"partitions", "ls", s.Orders, "-o", "wide"}, 0, []string{"LANES", "main:2 backfill:4", s.HaltedIDs[0]}},
		{"partitions show", []string{"partitions", "show", s.Orders, s.Halted}, 0, []string{"halted on a poison message", s.HaltedIDs[0], "delivered 7 times", "partitions skip-head", "partitions release"}},
		{"partitions fsck", []string{"partitions", "fsck", s.Payments}, 0, []string{"unindexed-stream", s.Orphan, "missing-stream", s.Ghost}},
		{"leases ls", []string{"leases", "ls", "--category", s.Orders}, 0, []string{"held", "expired", "free", s.HaltedOwner}},
		{"parked ls", []string{"parked", "ls"}, 0, []string{s.Projector, s.Halted, "amount must be positive"}},
		{"parked show", []string{"parked", "show", s.Projector, s.Halted}, 0, []string{"Position", s.HaltedIDs[0], "Payload hidden"}},
		{"nodes ls", []string{"nodes", "ls", "--service", "shop"}, 0, []string{"node-a", "node-b", s.Backfill}},
		{"check", []string{"check"}, 8, []string{"parked", "FAILED", "expiredLeases"}},
		{"reap dry run", []string{"partitions", "reap", s.Orders, s.Cold, "--dry-run"}, 0, []string{"reap", s.Cold}},
		{"trim dry run", []string{"streams", "trim", "billing::payment:p-1", "--maxlen", "1", "--dry-run"}, 0, []string{"trim", s.Audit}},
	}
	for _, c := range cases {
		for _, tty := range []bool{false, true} {
			name := c.name
			if tty {
				name += " on a terminal"
			}
			t.Run(name, func(t *testing.T) {
				r := e.cli(tty).run(c.args...)
				r.wantCode(t, c.code)
				for _, w := range c.want {
					if !strings.Contains(stripANSI(r.stdout), w) {
						t.Errorf("stdout lacks %q:\n%s", w, r.stdout)
					}
				}
				if hasANSI(r.stdout) != tty {
					t.Errorf("ANSI escapes in stdout: %v, want %v:\n%q", hasANSI(r.stdout), tty, r.stdout)
				}
				if m := relativeTime.FindString(r.stdout); !tty && m != "" {
					t.Errorf("a relative time (%q) without a terminal, where RFC 3339 belongs:\n%s", m, r.stdout)
				}
				if !tty && strings.Contains(r.stderr, "\r") {
					t.Errorf("progress on stderr without a terminal: %q", r.stderr)
				}
			})
		}
	}
}

// relativeTime matches a point in time written as its distance from now
// ("5m25s ago", "in 3m"), which only a terminal's tables write.
var relativeTime = regexp.MustCompile(`\b\d+(ms|s|m|h|d)[0-9smhd]* ago\b|\bin \d+(ms|s|m|h|d)\b`)

// stripANSI removes SGR escapes (colours) so tests can look at the text.
func stripANSI(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == 0x1b && i+1 < len(s) && s[i+1] == '[' {
			j := i + 2
			for j < len(s) && (s[j] < 0x40 || s[j] > 0x7e) {
				j++
			}
			i = j
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
