package main

import (
	"strings"
	"testing"
)

func TestCompletionForEveryShell(t *testing.T) {
	markers := map[string]string{
		"bash":       "complete -o default -F __start_protctl protctl",
		"zsh":        "#compdef protctl",
		"fish":       "complete -c protctl",
		"powershell": "Register-ArgumentCompleter",
	}
	for shell, marker := range markers {
		t.Run(shell, func(t *testing.T) {
			r := newCLI(t).run("completion", shell)
			r.wantCode(t, 0)
			if !strings.Contains(r.stdout, marker) {
				t.Fatalf("%s completion lacks %q", shell, marker)
			}
			if r.stderr != "" {
				t.Fatalf("stderr %q", r.stderr)
			}
		})
	}
}

func TestFlagValueCompletion(t *testing.T) {
	cases := map[string][]string{
		"--output": {"table", "wide", "json", "jsonl", "yaml"},
		"--color":  {"auto", "always", "never"},
		"--layout": {"protean", "cluster"},
	}
	for flag, want := range cases {
		r := newCLI(t).run("__complete", "version", flag, "")
		r.wantCode(t, 0)
		for _, w := range want {
			if !strings.Contains(r.stdout, w+"\n") {
				t.Fatalf("%s completion lacks %q:\n%s", flag, w, r.stdout)
			}
		}
	}
}

func TestContextCompletionReadsTheConfigFile(t *testing.T) {
	cl := newCLI(t)
	writeFile(t, cl.env["XDG_CONFIG_HOME"]+"/protctl/config.yaml", "contexts:\n  - name: prod\n  - name: staging\n")
	r := cl.run("__complete", "version", "--context", "")
	r.wantCode(t, 0)
	if !strings.Contains(r.stdout, "prod\n") || !strings.Contains(r.stdout, "staging\n") {
		t.Fatalf("context completion:\n%s", r.stdout)
	}
}
