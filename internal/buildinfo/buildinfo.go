// Package buildinfo says which protctl this is. Release builds set the
// variables with the linker:
//
//	go build -ldflags "-X github.com/protctl/protctl/internal/buildinfo.Version=v1.2.3 \
//	  -X github.com/protctl/protctl/internal/buildinfo.Commit=$(git rev-parse HEAD) \
//	  -X github.com/protctl/protctl/internal/buildinfo.Date=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
//
// Without them (go install, go run) Get falls back to what the Go toolchain
// recorded in the binary: the module version and the VCS revision and time.
package buildinfo

import (
	"runtime"
	"runtime/debug"
)

// Set with -ldflags "-X ...". Empty means "not set by the linker".
var (
	Version = ""
	Commit  = ""
	Date    = ""
)

// DevVersion is the version of a build that carries none: a go run or go
// build from a work tree.
const DevVersion = "dev"

// Info describes the running binary. Commit and Date are empty when
// unknown; the JSON form shows them as null.
type Info struct {
	Version   string  `json:"version"`
	Commit    *string `json:"commit"`
	Date      *string `json:"date"`
	GoVersion string  `json:"goVersion"`
	Platform  string  `json:"platform"`
}

// Get returns the build's information: linker values first, then the
// toolchain's build info, then "dev" and null.
func Get() Info {
	return get(debug.ReadBuildInfo)
}

func get(read func() (*debug.BuildInfo, bool)) Info {
	version, commit, date := Version, Commit, Date
	if bi, ok := read(); ok && bi != nil {
		if version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if commit == "" {
					commit = s.Value
				}
			case "vcs.time":
				if date == "" {
					date = s.Value
				}
			}
		}
	}
	if version == "" {
		version = DevVersion
	}
	return Info{
		Version:   version,
		Commit:    nonEmpty(commit),
		Date:      nonEmpty(date),
		GoVersion: runtime.Version(),
		Platform:  runtime.GOOS + "/" + runtime.GOARCH,
	}
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
