package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// progressBar draws one line of progress on a terminal (rewritten in place
// with \r) or, when the writer is not a terminal, prints a plain line at most
// every few seconds, so that logs stay readable:
//
//	gaussian_noise/5  [=========>          ]  4800/10000  48%  212.4 img/s  ETA 0:24
//
// The time left is the items left at the rate measured so far. For eval,
// whose methods differ in speed many times over (a run of Source, TENT and
// SubTTA-M showed 1:27 with 3:15 left when one rate was taken over all
// three), the rate and the time left are those of the method in progress
// alone: its images left in this run at its own rate since it started
// (setMethod). A finished method's rate is never applied to another, and
// the methods not yet started, whose speed is not known, are not
// estimated: the bar says how many follow ("ETA 0:06 for subtta-m, then 1
// more method").
//
// It is safe for concurrent use.
//
// It is not github.com/schollz/progressbar/v3 because that bar (v3.19.1),
// written to a log file, redraws with \r on one endless line (10,000 items
// over 12 s: 370 redraws, 25 KB, no newline) and shows its first rate from
// the first item (352,858 img/s).
type progressBar struct {
	mu       sync.Mutex
	w        io.Writer
	label    string
	total    int
	done     int
	drawn    int // done at the last draw, -1 before the first
	start    time.Time
	last     time.Time
	terminal bool
	width    int
	// every is the minimum time between two redraws.
	every time.Duration
	// unit names the items in the rate ("img", "texts"): unit/s.
	unit string
	// ended is set by Done.
	ended bool

	// The method in progress, for eval (setMethod); empty otherwise.
	method                  string
	methodStart, lastAdd    time.Time
	methodDone, methodTotal int
	methodsLeft             int
}

// progressLogInterval is how often progress is written where it is not
// drawn on a terminal (a log file, a pipe).
const progressLogInterval = 5 * time.Second

// newProgress starts a bar for total items of work, labelled label, its
// rate in images a second (img/s; SetUnit for other items).
func newProgress(w io.Writer, label string, total int) *progressBar {
	p := &progressBar{w: w, label: label, total: total, start: time.Now(), terminal: isTerminal(w), width: 24, drawn: -1, unit: "img"}
	p.every = progressLogInterval
	if p.terminal {
		p.every = 100 * time.Millisecond
	}
	return p
}

// SetTotal changes the amount of work (a resumed run finds some of it
// done).
func (p *progressBar) SetTotal(total int) {
	p.mu.Lock()
	p.total = total
	p.mu.Unlock()
}

// SetUnit names the items of the rate: unit/s (as "texts/s").
func (p *progressBar) SetUnit(unit string) {
	p.mu.Lock()
	p.unit = unit
	p.mu.Unlock()
}

// SetLabel changes the label (the item being worked on).
func (p *progressBar) SetLabel(label string) {
	p.mu.Lock()
	p.label = label
	p.mu.Unlock()
}

// setMethod says which method the items are of (eval runs one method
// after another), at time now: its items done and to do in this run, and
// how many methods follow it. Its time starts at the bar's last Add (the
// end of the previous method's last item), or the bar's start.
func (p *progressBar) setMethod(now time.Time, method string, done, total, left int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if method != p.method {
		p.method, p.methodStart = method, p.lastAdd
		if p.methodStart.IsZero() {
			p.methodStart = p.start
		}
	}
	p.methodDone, p.methodTotal, p.methodsLeft = done, total, left
}

// Add records n more finished items and redraws if it is time.
func (p *progressBar) Add(n int) { p.addAt(time.Now(), n) }

// addAt is Add at time now.
func (p *progressBar) addAt(now time.Time, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done += n
	p.lastAdd = now
	if now.Sub(p.last) >= p.every || p.done >= p.total {
		p.last = now
		p.draw(now)
	}
}

// Done draws the final state, unless it is already shown, and ends the
// line; once: a later call (a deferred one after a message that needed the
// line ended) does nothing.
func (p *progressBar) Done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended {
		return
	}
	p.ended = true
	if p.drawn != p.done {
		p.draw(time.Now())
	}
	if p.terminal {
		fmt.Fprintln(p.w)
	}
}

// rateAfter is how long a bar runs before it shows a rate and an ETA.
const rateAfter = time.Second

func (p *progressBar) draw(now time.Time) {
	p.drawn = p.done
	el := now.Sub(p.start)
	frac := 0.0
	if p.total > 0 {
		frac = min(1, float64(p.done)/float64(p.total))
	}
	// A rate over the first instants (one item in a few microseconds) is
	// noise: it is shown from rateAfter on, or at the end.
	rate, eta := "--", "--:--"
	done, left, after := p.done, p.total-p.done, ""
	if p.method != "" {
		// eval: the rate and time left of the method in progress alone.
		el = now.Sub(p.methodStart)
		done, left = p.methodDone, p.methodTotal-p.methodDone
		switch {
		case p.methodsLeft == 1:
			after = fmt.Sprintf(" for %s, then 1 more method", p.method)
		case p.methodsLeft > 1:
			after = fmt.Sprintf(" for %s, then %d more methods", p.method, p.methodsLeft)
		}
	}
	if el > 0 && (el >= rateAfter || left <= 0) {
		r := float64(done) / el.Seconds()
		rate = fmt.Sprintf("%.1f", r)
		if r > 0 && p.total > 0 {
			eta = formatDuration(time.Duration(float64(max(left, 0))/r*float64(time.Second))) + after
		}
	}
	line := fmt.Sprintf("%s  %s  %d/%d  %3.0f%%  %s %s/s  ETA %s", p.label, bar(frac, p.width), p.done, p.total, 100*frac, rate, p.unit, eta)
	if p.terminal {
		fmt.Fprintf(p.w, "\r%s\033[K", line)
	} else {
		fmt.Fprintln(p.w, line)
	}
}

func bar(frac float64, width int) string {
	b := make([]byte, width+2)
	b[0], b[width+1] = '[', ']'
	fill := int(frac * float64(width))
	for i := 1; i <= width; i++ {
		switch {
		case i <= fill:
			b[i] = '='
		case i == fill+1 && fill < width:
			b[i] = '>'
		default:
			b[i] = ' '
		}
	}
	return string(b)
}

// formatDuration writes d as h:mm:ss, or m:ss under an hour.
func formatDuration(d time.Duration) string {
	s := int(d.Round(time.Second).Seconds())
	if s >= 3600 {
		return fmt.Sprintf("%d:%02d:%02d", s/3600, s/60%60, s%60)
	}
	return fmt.Sprintf("%d:%02d", s/60, s%60)
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
