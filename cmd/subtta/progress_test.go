package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestProgressRate: the rate and ETA appear once the bar has run for a
// while (or at the end), never from the first instants' noise.
func TestProgressRate(t *testing.T) {
	for _, tc := range []struct {
		name       string
		done       int
		after      time.Duration
		rate, eta  string
		wantFilled bool
	}{
		{"first item after 5µs", 1, 5 * time.Microsecond, "-- img/s", "ETA --:--", false},
		{"400 items after 2 s", 400, 2 * time.Second, "200.0 img/s", "ETA 0:48", false},
		{"all items after 5 ms", 10000, 5 * time.Millisecond, "2000000.0 img/s", "ETA 0:00", true},
	} {
		var buf bytes.Buffer
		p := newProgress(&buf, "x", 10000)
		p.done = tc.done
		p.draw(p.start.Add(tc.after))
		line := buf.String()
		if !strings.Contains(line, tc.rate) || !strings.Contains(line, tc.eta) {
			t.Errorf("%s: %q; want %q and %q", tc.name, line, tc.rate, tc.eta)
		}
		if full := strings.Contains(line, "[========================]"); full != tc.wantFilled {
			t.Errorf("%s: %q: full bar %v", tc.name, line, full)
		}
	}
}
