package main

import "testing"

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
