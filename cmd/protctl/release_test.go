package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// The release is described once, in .goreleaser.yaml. These tests read it
// and check what goreleaser itself would need CI to install: the targets
// and static builds, that the linker flags set internal/buildinfo, that
// every file the archives list exists or is generated, and they build with
// its flags (see also TestVersionFromLdflags). scripts/crossbuild builds
// all six targets and runs `goreleaser check` where goreleaser is installed.

const buildinfoPkg = "github.com/protctl/protctl/internal/buildinfo"

type goreleaserConfig struct {
	Version int `yaml:"version"`
	Before  struct {
		Hooks []string `yaml:"hooks"`
	} `yaml:"before"`
	Builds []struct {
		ID      string   `yaml:"id"`
		Main    string   `yaml:"main"`
		Binary  string   `yaml:"binary"`
		Env     []string `yaml:"env"`
		Goos    []string `yaml:"goos"`
		Goarch  []string `yaml:"goarch"`
		Flags   []string `yaml:"flags"`
		Ldflags []string `yaml:"ldflags"`
	} `yaml:"builds"`
	Archives []struct {
		IDs             []string `yaml:"ids"`
		Formats         []string `yaml:"formats"`
		FormatOverrides []struct {
			Goos    string   `yaml:"goos"`
			Formats []string `yaml:"formats"`
		} `yaml:"format_overrides"`
		Files []string `yaml:"files"`
	} `yaml:"archives"`
	Checksum struct {
		NameTemplate string `yaml:"name_template"`
		Algorithm    string `yaml:"algorithm"`
	} `yaml:"checksum"`
}

// repoRoot is the module's root, two levels above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func readGoreleaser(t *testing.T) goreleaserConfig {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), ".goreleaser.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c goreleaserConfig
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	if err := dec.Decode(&c); err != nil {
		t.Fatalf(".goreleaser.yaml: %v", err)
	}
	if len(c.Builds) != 1 {
		t.Fatalf(".goreleaser.yaml has %d builds, want 1", len(c.Builds))
	}
	return c
}

// releaseFlags renders the build's flags and ldflags with the given
// template values, as goreleaser would.
func releaseFlags(t *testing.T, c goreleaserConfig, vars map[string]string) (flags []string, ldflags string) {
	t.Helper()
	tmpl := regexp.MustCompile(`\{\{\s*\.(\w+)\s*\}\}`)
	var lds []string
	for _, l := range c.Builds[0].Ldflags {
		lds = append(lds, tmpl.ReplaceAllStringFunc(l, func(m string) string {
			name := tmpl.FindStringSubmatch(m)[1]
			v, ok := vars[name]
			if !ok {
				t.Fatalf(".goreleaser.yaml ldflags use {{.%s}}, which this test does not set", name)
			}
			return v
		}))
	}
	return c.Builds[0].Flags, strings.Join(lds, " ")
}

// releaseBuild builds protctl for goos/goarch with .goreleaser.yaml's env,
// flags and ldflags (vars fill the templates) and returns the binary.
func releaseBuild(t *testing.T, goos, goarch string, vars map[string]string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go toolchain on PATH")
	}
	c := readGoreleaser(t)
	flags, ldflags := releaseFlags(t, c, vars)
	bin := filepath.Join(t.TempDir(), "protctl")
	if goos == "windows" {
		bin += ".exe"
	}
	args := append([]string{"build"}, flags...)
	args = append(args, "-ldflags", ldflags, "-o", bin, "./"+strings.TrimPrefix(c.Builds[0].Main, "./"))
	build := exec.Command(goBin, args...)
	build.Dir = repoRoot(t)
	build.Env = append(os.Environ(), c.Builds[0].Env...)
	build.Env = append(build.Env, "GOOS="+goos, "GOARCH="+goarch, "GOFLAGS=-buildvcs=false")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return bin
}

// releaseBinary is a host build with the release's flags and fixed values.
func releaseBinary(t *testing.T) string {
	t.Helper()
	return releaseBuild(t, runtime.GOOS, runtime.GOARCH, testReleaseVars)
}

var testReleaseVars = map[string]string{
	"Version":    "9.8.7",
	"FullCommit": "feedfacefeedfacefeedfacefeedfacefeedface",
	"CommitDate": "2026-02-03T04:05:06Z",
}

func TestReleaseConfigTargetsAndFlags(t *testing.T) {
	c := readGoreleaser(t)
	if c.Version != 2 {
		t.Fatalf("version %d, want 2", c.Version)
	}
	b := c.Builds[0]
	if b.Main != "./cmd/protctl" || b.Binary != "protctl" {
		t.Errorf("build main %q binary %q", b.Main, b.Binary)
	}
	if !slices.Contains(b.Env, "CGO_ENABLED=0") {
		t.Errorf("build env %v: want CGO_ENABLED=0 (static binaries)", b.Env)
	}
	goos, goarch := slices.Sorted(slices.Values(b.Goos)), slices.Sorted(slices.Values(b.Goarch))
	if !slices.Equal(goos, []string{"darwin", "linux", "windows"}) || !slices.Equal(goarch, []string{"amd64", "arm64"}) {
		t.Errorf("targets %v x %v, want linux, darwin, windows x amd64, arm64", b.Goos, b.Goarch)
	}
	ld := strings.Join(b.Ldflags, " ")
	for _, v := range []string{"Version", "Commit", "Date"} {
		if !strings.Contains(ld, "-X "+buildinfoPkg+"."+v+"=") {
			t.Errorf("ldflags %q do not set buildinfo.%s", ld, v)
		}
	}

	// The same variables in every other place that builds a release-like
	// binary, so that none of them drifts.
	for _, file := range []string{"Makefile", "scripts/crossbuild"} {
		src, err := os.ReadFile(filepath.Join(repoRoot(t), file))
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range []string{"Version", "Commit", "Date"} {
			if !regexp.MustCompile(`(\$\(PKG\)/internal/buildinfo|\$PKG)\.` + v + `=`).Match(src) {
				t.Errorf("%s does not set buildinfo.%s", file, v)
			}
		}
	}

	if len(c.Archives) != 1 {
		t.Fatalf("%d archives, want 1", len(c.Archives))
	}
	a := c.Archives[0]
	if !slices.Equal(a.Formats, []string{"tar.gz"}) || len(a.FormatOverrides) != 1 || a.FormatOverrides[0].Goos != "windows" || !slices.Equal(a.FormatOverrides[0].Formats, []string{"zip"}) {
		t.Errorf("archive formats %v %+v, want tar.gz and zip for windows", a.Formats, a.FormatOverrides)
	}
	for _, want := range []string{"README.md", "LICENSE", "completions/*", "manpages/*"} {
		if !slices.Contains(a.Files, want) {
			t.Errorf("archives lack %s: %v", want, a.Files)
		}
	}
	if c.Checksum.NameTemplate == "" || c.Checksum.Algorithm != "sha256" {
		t.Errorf("checksum %+v", c.Checksum)
	}
	if !slices.Contains(c.Before.Hooks, "scripts/release-assets") {
		t.Errorf("before hooks %v do not generate completions and man pages", c.Before.Hooks)
	}
}

// TestReleaseAssetsFillTheArchives runs the before hook and checks that
// every file the archives list is in the repository or was generated:
// four completion scripts and a man page per command.
func TestReleaseAssetsFillTheArchives(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	c := readGoreleaser(t)
	out := t.TempDir()
	cmd := exec.Command(filepath.Join(repoRoot(t), "scripts", "release-assets"), out)
	cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH=1772366400") // 2026-03-01
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/release-assets: %v\n%s", err, b)
	}
	for _, pattern := range c.Archives[0].Files {
		inRepo, _ := filepath.Glob(filepath.Join(repoRoot(t), pattern))
		generated, _ := filepath.Glob(filepath.Join(out, pattern))
		if len(inRepo)+len(generated) == 0 {
			t.Errorf("archive file %q: nothing matches", pattern)
		}
	}
	for _, f := range []string{"protctl.bash", "protctl.zsh", "protctl.fish", "protctl.ps1"} {
		if st, err := os.Stat(filepath.Join(out, "completions", f)); err != nil || st.Size() == 0 {
			t.Errorf("completions/%s: %v", f, err)
		}
	}
	pages, _ := filepath.Glob(filepath.Join(out, "manpages", "*.1"))
	if want := len(availableCommands(testRoot())); len(pages) != want {
		t.Errorf("%d man pages, want one per command (%d)", len(pages), want)
	}
	root, err := os.ReadFile(filepath.Join(out, "manpages", "protctl.1"))
	if err != nil || !strings.Contains(string(root), `"2026-03-01"`) {
		t.Errorf("protctl.1 is not dated by SOURCE_DATE_EPOCH (%v):\n%.300s", err, root)
	}
}

// TestReleaseGoreleaserCheck validates .goreleaser.yaml with goreleaser
// itself where it is installed (scripts/crossbuild does too); CI machines
// without it rely on the checks above.
func TestReleaseGoreleaserCheck(t *testing.T) {
	bin, err := exec.LookPath("goreleaser")
	if err != nil {
		t.Skip("goreleaser is not installed")
	}
	cmd := exec.Command(bin, "check")
	cmd.Dir = repoRoot(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("goreleaser check: %v\n%s", err, out)
	}
}
