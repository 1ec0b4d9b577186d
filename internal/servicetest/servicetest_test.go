//go:build unix

package servicetest

import (
	"testing"
	"time"
)

// Redis starts a redis-server that answers PING, and Kill ends it.
func TestRedis(t *testing.T) {
	url, p := Redis(t)
	if url == "" || p.Exited() {
		t.Fatalf("redis-server at %q exited: %v", url, p.Exited())
	}
	p.Kill()
	if !p.Exited() {
		t.Error("redis-server still runs after Kill")
	}
}

// Stop ends a program with SIGTERM and reports how it ended.
func TestStartStop(t *testing.T) {
	p := Start(t, "sleep", Program(t, "sleep", "coreutils"), []string{"60"}, nil)
	if err := p.Stop(10 * time.Second); err == nil || !p.Exited() {
		t.Errorf("sleep after SIGTERM: exited %v, error %v (want a signal error)", p.Exited(), err)
	}
}
