package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/subtta/subtta/eval"
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

// TestProgressETAPerMethod: eval's methods differ in speed many times
// over, so the time left is the current method's images at its own rate;
// a finished method's rate is not applied to it, and the methods still to
// come are counted, not guessed.
func TestProgressETAPerMethod(t *testing.T) {
	var buf bytes.Buffer
	clock := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	var bar *progressBar
	report := progressWith(&buf, &bar, func() time.Time { return clock })
	// source: 1,000 images at 500 img/s; then subtta-m at 100 img/s, then tent.
	done := 0
	for range 10 {
		clock = clock.Add(200 * time.Millisecond)
		done += 100
		report(eval.Progress{Method: "source", Domain: "fog/5", Done: done, Total: 3000, MethodDone: done, MethodTotal: 1000, MethodsLeft: 2})
	}
	for i := range 4 {
		clock = clock.Add(time.Second)
		done += 100
		report(eval.Progress{Method: "subtta-m", Domain: "fog/5", Done: done, Total: 3000, MethodDone: 100 * (i + 1), MethodTotal: 1000, MethodsLeft: 1})
	}
	for _, tc := range []struct {
		name string
		left int
		want []string
	}{
		{"one method after", 1, []string{"1400/3000", "100.0 img/s", "ETA 0:06 for subtta-m, then 1 more method"}},
		{"last method", 0, []string{"1400/3000", "100.0 img/s", "ETA 0:06"}},
	} {
		bar.setMethod(clock, "subtta-m", 400, 1000, tc.left)
		buf.Reset()
		bar.draw(clock)
		for _, w := range tc.want {
			if !strings.Contains(buf.String(), w) {
				t.Errorf("%s: %q; want %q", tc.name, buf.String(), w)
			}
		}
		if tc.left == 0 && strings.Contains(buf.String(), "more method") {
			t.Errorf("%s: %q names methods after the last", tc.name, buf.String())
		}
	}
}
