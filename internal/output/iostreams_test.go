package output

import "testing"

func TestEnvironmentDecidesColourAndWidth(t *testing.T) {
	cases := []struct {
		name      string
		env       map[string]string
		wantColor bool
		wantWidth int
	}{
		{"plain terminal", map[string]string{"TERM": "xterm-256color"}, true, DefaultWidth},
		{"NO_COLOR", map[string]string{"NO_COLOR": "1"}, false, DefaultWidth},
		{"empty NO_COLOR counts as unset", map[string]string{"NO_COLOR": ""}, true, DefaultWidth},
		{"dumb terminal", map[string]string{"TERM": "dumb"}, false, DefaultWidth},
		{"COLUMNS", map[string]string{"COLUMNS": "132"}, true, 132},
		{"bad COLUMNS", map[string]string{"COLUMNS": "wide"}, true, DefaultWidth},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := &IOStreams{stdoutTTY: true, colorMode: ColorAuto}
			s.applyEnv(func(k string) string { return c.env[k] })
			if s.ColorEnabled() != c.wantColor {
				t.Fatalf("ColorEnabled = %v, want %v", s.ColorEnabled(), c.wantColor)
			}
			if s.TerminalWidth() != c.wantWidth {
				t.Fatalf("TerminalWidth = %d, want %d", s.TerminalWidth(), c.wantWidth)
			}
		})
	}
}

func TestTestStreamsAreNotTerminals(t *testing.T) {
	s, _, _, _ := Test()
	if s.IsStdinTTY() || s.IsStdoutTTY() || s.IsStderrTTY() || s.CanPrompt() || s.ColorEnabled() {
		t.Fatal("Test streams must start as a pipe without colour")
	}
	s.SetTTY(true)
	if !s.IsStdinTTY() || !s.IsStdoutTTY() || !s.IsStderrTTY() || !s.CanPrompt() || !s.ColorEnabled() {
		t.Fatal("SetTTY(true) must make every stream a terminal")
	}
	s.SetTerminalWidth(0)
	if s.TerminalWidth() != DefaultWidth {
		t.Fatal("an unmeasurable width is DefaultWidth")
	}
}

func TestParseColorMode(t *testing.T) {
	for in, want := range map[string]ColorMode{"": ColorAuto, "auto": ColorAuto, "always": ColorAlways, "never": ColorNever} {
		if got, err := ParseColorMode(in); err != nil || got != want {
			t.Fatalf("ParseColorMode(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParseColorMode("sometimes"); err == nil {
		t.Fatal("sometimes is not a colour mode")
	}
}
