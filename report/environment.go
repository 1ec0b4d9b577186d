package report

import (
	"bufio"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
)

// Environment says where results were computed: which build of subtta on
// which machine. Each record carries its Build and results.json the whole
// Environment of the run that wrote it, so that a table assembled over
// several runs (a resumed folder) shows whether one build made it all.
type Environment struct {
	// Build identifies the binary: the VCS revision it was built from
	// (first 12 hex digits, "+modified" for an uncommitted tree), else the
	// main module's version, else "unknown" (go run, a test binary).
	Build   string `json:"build"`
	Go      string `json:"go"` // the toolchain that built it
	OS      string `json:"os"`
	Arch    string `json:"arch"`
	CPU     string `json:"cpu,omitempty"` // the processor's model name, where the OS tells it
	Threads int    `json:"threads"`       // GOMAXPROCS
}

// CurrentEnvironment describes this process.
func CurrentEnvironment() Environment {
	bi, _ := debug.ReadBuildInfo()
	return Environment{Build: BuildOf(bi), Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH,
		CPU: cpuModel("/proc/cpuinfo"), Threads: runtime.GOMAXPROCS(0)}
}

// BuildOf returns Environment.Build for the build information bi (nil:
// "unknown").
func BuildOf(bi *debug.BuildInfo) string {
	if bi == nil {
		return "unknown"
	}
	var rev string
	modified := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	switch {
	case rev != "":
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if modified {
			rev += "+modified"
		}
		return rev
	case bi.Main.Version != "" && bi.Main.Version != "(devel)":
		return bi.Main.Version
	}
	return "unknown"
}

// cpuModel returns the first "model name" of a /proc/cpuinfo file, or "".
func cpuModel(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
