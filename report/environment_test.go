package report

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
)

func TestBuildOf(t *testing.T) {
	vcs := func(rev, modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}}
	}
	for _, c := range []struct {
		name string
		bi   *debug.BuildInfo
		want string
	}{
		{"no information", nil, "unknown"},
		{"go run", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "unknown"},
		{"go install @version", &debug.BuildInfo{Main: debug.Module{Version: "v0.3.0"}}, "v0.3.0"},
		{"clean tree", &debug.BuildInfo{Settings: vcs("2623701a1361975b48e86821ca80624ed6a16bb5", "false")}, "2623701a1361"},
		{"modified tree", &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-x+dirty"}, Settings: vcs("2623701a1361975b48e86821ca80624ed6a16bb5", "true")}, "2623701a1361+modified"},
	} {
		if got := BuildOf(c.bi); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

func TestCPUModel(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpuinfo")
	os.WriteFile(path, []byte("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9B14\nflags\t\t: fpu\n\nprocessor\t: 1\nmodel name\t: AMD EPYC 9B14\n"), 0o644)
	if got := cpuModel(path); got != "AMD EPYC 9B14" {
		t.Errorf("model %q", got)
	}
	if got := cpuModel(filepath.Join(t.TempDir(), "none")); got != "" {
		t.Errorf("model of a missing file %q", got)
	}
}
