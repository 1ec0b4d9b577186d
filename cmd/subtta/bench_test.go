package main

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/subtta/subtta/autograd/kernel"
)

// TestPhaseLine: the phases in the order a step runs them (unknown ones
// after, sorted), each phase's median over the runs, and the median of
// what each run's phases leave of it (not the difference of medians).
func TestPhaseLine(t *testing.T) {
	run := func(seconds float64, phases map[string]float64) benchSample {
		return benchSample{seconds: seconds, phases: phases}
	}
	for _, tc := range []struct {
		name    string
		samples []benchSample
		want    string
	}{
		{"none", []benchSample{run(1, nil), run(2, nil)}, ""},
		{"step order", []benchSample{
			run(0.100, map[string]float64{"predict": 0.020, "align": 0.040, "adapt": 0.030}),
		}, "phases, median ms a batch: align 40.0, adapt 30.0, predict 20.0, outside them 10.0"},
		{"unknown after, sorted", []benchSample{
			run(0.010, map[string]float64{"zeta": 0.001, "predict": 0.002, "beta": 0.003, "encode": 0.004}),
		}, "phases, median ms a batch: encode 4.0, predict 2.0, beta 3.0, zeta 1.0, outside them 0.0"},
		{"medians per phase and of each run's rest", []benchSample{
			run(0.100, map[string]float64{"align": 0.050, "adapt": 0.010}), // rest 40
			run(0.060, map[string]float64{"align": 0.020, "adapt": 0.030}), // rest 10
			run(0.090, map[string]float64{"align": 0.030, "adapt": 0.040}), // rest 20
		}, "phases, median ms a batch: align 30.0, adapt 30.0, outside them 20.0"},
		{"a phase missing from a run counts 0 there", []benchSample{
			run(0.010, map[string]float64{"align": 0.004}),
			run(0.010, map[string]float64{"align": 0.004, "adapt": 0.002}),
			run(0.010, map[string]float64{"align": 0.004, "adapt": 0.002}),
		}, "phases, median ms a batch: align 4.0, adapt 2.0, outside them 4.0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := phaseLine(tc.samples); got != tc.want {
				t.Errorf("phaseLine:\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

// signalWhen sends the test process sig once, when ready reports true
// (asked every poll), as Ctrl-C or a scheduler's SIGTERM would while a
// command runs in the test; the returned stop ends the polling. The
// test's own handler, kept until the test ends, keeps a signal that comes
// after the command has stopped listening from ending the test binary.
func signalWhen(t *testing.T, sig syscall.Signal, poll time.Duration, ready func() bool) (stop func()) {
	t.Helper()
	mine := make(chan os.Signal, 1)
	signal.Notify(mine, sig)
	t.Cleanup(func() { signal.Stop(mine) })
	done := make(chan bool)
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(poll):
			}
			if ready() {
				syscall.Kill(os.Getpid(), sig)
				return
			}
		}
	}()
	return func() { close(done) }
}

// readProfile returns the decompressed protobuf of the pprof profile at
// path (runtime/pprof writes it gzip'd), failing the test if the file is
// empty or not a whole gzip stream.
func readProfile(t *testing.T, path string) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	b, err := io.ReadAll(z)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(b) == 0 {
		t.Fatalf("%s: an empty profile", path)
	}
	return b
}

// TestBenchInterrupted: SIGINT or SIGTERM once the forward pass's figures
// are printed stops bench after the repetition in progress of the SubTTA
// step (or before its first, if the signal comes in its warm-up), with
// status 130: what it measured is printed (the step's figures over the
// repetitions done), and both profiles are written whole and said so.
func TestBenchInterrupted(t *testing.T) {
	defer func(d time.Duration) { benchCalibration = d }(benchCalibration)
	benchCalibration = time.Millisecond // the ceilings are not what is tested
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			dir := t.TempDir()
			cpu, mem := filepath.Join(dir, "cpu.prof"), filepath.Join(dir, "mem.prof")
			const reps = 100 // far more than the signal lets run
			var out, errb syncBuffer
			var seen time.Time
			stop := signalWhen(t, sig, 5*time.Millisecond, func() bool {
				// A little after the forward pass's line: in the step's
				// repetitions, mostly.
				if seen.IsZero() && strings.Contains(out.String(), "images/s") {
					seen = time.Now()
				}
				return !seen.IsZero() && time.Since(seen) > 150*time.Millisecond
			})
			st := run([]string{"bench", "--model", "default", "--batch", "2", "--reps", strconv.Itoa(reps), "--only", "forward,subtta",
				"--cpuprofile", cpu, "--memprofile", mem}, &out, &errb)
			stop()
			text, msg := out.String(), errb.String()
			t.Logf("stderr: %s", msg)
			if st != 130 {
				t.Fatalf("status %d, want 130; stdout:\n%s\nstderr:\n%s", st, text, msg)
			}
			if !regexp.MustCompile(`(?m)^forward +[0-9.]+ images/s  \(median of ` + strconv.Itoa(reps) + `:`).MatchString(text) {
				t.Errorf("no figures of the forward pass's %d repetitions:\n%s", reps, text)
			}
			if !strings.Contains(text, "peak resident memory: ") {
				t.Errorf("no peak resident memory:\n%s", text)
			}
			wantTail := "; CPU profile written to " + cpu + "; heap profile written to " + mem + "\n"
			if !strings.HasPrefix(msg, "interrupted ") || !strings.HasSuffix(msg, wantTail) || strings.Count(msg, "\n") != 1 {
				t.Errorf("stderr %q: want one line \"interrupted …%s\"", msg, wantTail)
			}
			// The step cut short: its figures are those of the repetitions
			// done, and the message says how many.
			if m := regexp.MustCompile(`after (\d+) of 100 repetitions of SubTTA-MINT step`).FindStringSubmatch(msg); m != nil {
				if !strings.Contains(text, "SubTTA-MINT step (ImageNet-C preset)") || !strings.Contains(text, "(median of "+m[1]+":") {
					t.Errorf("stderr says %s repetitions of the step, stdout has not their figures:\n%s", m[1], text)
				}
			} else if !strings.Contains(msg, "before the first repetition of SubTTA-MINT step") || strings.Contains(text, "SubTTA-MINT") {
				t.Errorf("stderr %q says neither how many repetitions of the step were done nor that none was; stdout:\n%s", msg, text)
			}
			if p := readProfile(t, cpu); !bytes.Contains(p, []byte("nanoseconds")) {
				t.Errorf("%s is not a CPU profile", cpu)
			}
			if p := readProfile(t, mem); !bytes.Contains(p, []byte("alloc_space")) {
				t.Errorf("%s is not a heap profile", mem)
			}
		})
	}
}

// TestBenchProfileExcludesCalibration: --cpuprofile profiles the timed
// repetitions, not the measuring of the CPU's ceilings that bench does
// between them without it (kernel.PeakGFLOPS and KernelGFLOPS, 2×20 ms a
// repetition here, several times the passes' own time): with it they are
// measured before the profile starts, and the figures say so.
func TestBenchProfileExcludesCalibration(t *testing.T) {
	defer func(d time.Duration) { benchCalibration = d }(benchCalibration)
	benchCalibration = 20 * time.Millisecond
	cpu := filepath.Join(t.TempDir(), "cpu.prof")
	var out, errb bytes.Buffer
	if st := run([]string{"bench", "--model", "default", "--batch", "2", "--reps", "10", "--only", "forward", "--cpuprofile", cpu}, &out, &errb); st != 0 {
		t.Fatalf("status %d: %s", st, errb.String())
	}
	p := readProfile(t, cpu)
	for _, fn := range []string{"kernel.fmaPeak", "kernel.PeakGFLOPS", "kernel.KernelGFLOPS"} {
		if bytes.Contains(p, []byte(fn)) {
			t.Errorf("the CPU profile holds %s: the ceilings were measured inside it", fn)
		}
	}
	text := out.String()
	if !strings.Contains(text, " measured before the profiled repetitions") || strings.Contains(text, "measured between repetitions") {
		t.Errorf("the figures do not say the ceilings were measured before the profile:\n%s", text)
	}
	if kernel.PeakGFLOPS(time.Millisecond) > 0 && !regexp.MustCompile(`(?m)^ +=.* kernel's [1-9][0-9]* GFLOP/s and .* of the [1-9][0-9]* GFLOP/s FMA peak`).MatchString(text) {
		t.Errorf("no ceilings measured for the figures:\n%s", text)
	}
}

// TestBenchArchNeedsModel: --arch and --model-config are refused, naming
// the flag, where nothing would read them: without --model (random
// ViT-B/32, which they used to leave as it was) and with the built-in
// model, which stores its architecture; nothing is timed. Other commands
// say the same of the built-in model (specUsage).
func TestBenchArchNeedsModel(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "--arch", "NoSuchArch", "--model-config", "/nonexistent"}, "--arch needs --model (a checkpoint): without --model bench times ViT-B/32 with random weights"},
		{[]string{"bench", "--arch", "ViT-B-32"}, "--arch needs --model"},
		{[]string{"bench", "--model-config", "/nonexistent"}, "--model-config needs --model"},
		{[]string{"bench", "--model", "", "--arch", "ViT-B-32"}, "--arch needs --model"},
		{[]string{"bench", "--model", "default", "--arch", "ViT-B-32"}, "--arch does not apply to the built-in model (--model default): it stores its own architecture"},
		{[]string{"bench", "--model", "default", "--model-config", "/nonexistent"}, "--model-config does not apply to the built-in model"},
		{[]string{"bench", "--model", "/nonexistent.safetensors", "--arch", ""}, "--arch is empty"},
		{[]string{"embed", "--text", "a cat", "--model", "default", "--arch", "ViT-B-32"}, "--model-config and --arch do not apply to the built-in model, which stores its own architecture"},
	} {
		args := append(tc.args, "--reps", "1", "--batch", "1")
		if tc.args[0] != "bench" {
			args = tc.args
		} else {
			args = append(args, "--only", "forward")
		}
		var out, errb bytes.Buffer
		st := run(args, &out, &errb)
		if st != 2 || !strings.Contains(errb.String(), tc.want) || out.Len() > 0 {
			t.Errorf("%q: status %d, stdout %q, stderr %q; want 2, nothing timed, and %q", tc.args, st, out.String(), errb.String(), tc.want)
		}
	}
}
