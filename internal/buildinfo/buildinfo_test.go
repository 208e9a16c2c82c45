package buildinfo

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestGetPrefersLinkerValues(t *testing.T) {
	defer setVars("v1.2.3", "abc123", "2026-01-02T03:04:05Z")()
	info := get(func() (*debug.BuildInfo, bool) {
		return &debug.BuildInfo{
			Main:     debug.Module{Version: "v0.0.9"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "fff"}, {Key: "vcs.time", Value: "2020-01-01T00:00:00Z"}},
		}, true
	})
	if info.Version != "v1.2.3" || deref(info.Commit) != "abc123" || deref(info.Date) != "2026-01-02T03:04:05Z" {
		t.Fatalf("linker values not used: %+v", info)
	}
	if info.GoVersion != runtime.Version() || info.Platform != runtime.GOOS+"/"+runtime.GOARCH {
		t.Fatalf("runtime fields wrong: %+v", info)
	}
}

func TestGetFallsBackToBuildInfo(t *testing.T) {
	defer setVars("", "", "")()
	info := get(func() (*debug.BuildInfo, bool) {
		return &debug.BuildInfo{
			Main:     debug.Module{Version: "v0.4.0"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "fff"}, {Key: "vcs.time", Value: "2020-01-01T00:00:00Z"}},
		}, true
	})
	if info.Version != "v0.4.0" || deref(info.Commit) != "fff" || deref(info.Date) != "2020-01-01T00:00:00Z" {
		t.Fatalf("build info fallback not used: %+v", info)
	}
}

func TestGetWithoutAnythingIsDevAndNull(t *testing.T) {
	defer setVars("", "", "")()
	info := get(func() (*debug.BuildInfo, bool) {
		return &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, true
	})
	if info.Version != DevVersion || info.Commit != nil || info.Date != nil {
		t.Fatalf("want dev with null commit and date, got %+v", info)
	}
}

func setVars(v, c, d string) (restore func()) {
	ov, oc, od := Version, Commit, Date
	Version, Commit, Date = v, c, d
	return func() { Version, Commit, Date = ov, oc, od }
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}
