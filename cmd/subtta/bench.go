package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/nlpodyssey/spago/ag"
	smat "github.com/nlpodyssey/spago/mat"
	"github.com/spf13/cobra"
	"github.com/subtta/subtta/autograd"
	"github.com/subtta/subtta/autograd/kernel"
	"github.com/subtta/subtta/clip"
	"github.com/subtta/subtta/report"
	"github.com/subtta/subtta/tta"
	"github.com/subtta/subtta/vit"
	"github.com/subtta/subtta/weights"
	"gonum.org/v1/gonum/mat"
)

// benchNames are the measurements --only selects from; the multi-view
// methods that need no text tower (vte, zero, dmn, sts) are timed when
// named.
var benchNames = []string{"forward", "backward", "subtta"}

// benchViewMethods are the multi-view methods --only may name.
var benchViewMethods = []string{"vte", "zero", "dmn", "sts"}

// benchOptions are the flags of bench.
type benchOptions struct {
	batch, reps, classes   int
	only                   string
	onlyGiven              bool // whether --only was given
	archGiven              bool // whether --arch was given
	modelConfigGiven       bool // whether --model-config was given
	cpuProfile, memProfile string
	model                  modelOptions
	precision              precisionFlag
	device                 deviceOptions

	stdout, stderr io.Writer
}

// newBenchCmd is `subtta bench`.
func newBenchCmd(stdout, stderr io.Writer) *cobra.Command {
	const summary = "images/s of the ViT-B/32 vision tower, forward and forward+backward"
	o := &benchOptions{stdout: stdout, stderr: stderr}
	c := &cobra.Command{
		Use:   "bench",
		Short: summary,
		Long:  summary + "\n\nWith --precision bf16 or int8, the forward pass is timed in it too, beside fp32 in the same run (the ratio is printed).",
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("batch") && cmd.Flags().Changed("batch-size") {
				return usagef("--batch and --batch-size are the same setting: give one")
			}
			o.onlyGiven = cmd.Flags().Changed("only")
			o.archGiven = cmd.Flags().Changed("arch")
			o.modelConfigGiven = cmd.Flags().Changed("model-config")
			return o.run(args)
		},
	}
	f := c.Flags()
	f.IntVar(&o.batch, "batch-size", 64, "images per batch")
	f.IntVar(&o.batch, "batch", 64, "same as --batch-size")
	f.IntVar(&o.reps, "reps", 5, "timed repetitions of each measurement (the median is reported)")
	f.IntVar(&o.classes, "classes", 1000, "classes of the random zero-shot head used by the SubTTA step")
	f.StringVar(&o.only, "only", "", "comma-separated measurements to run, of forward, backward (forward+backward) and subtta (default all), or a multi-view method ("+strings.Join(benchViewMethods, ", ")+"): one image of its views per batch")
	f.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile to this file (go tool pprof): from the first timed repetition to the last (the warm-up and set-up of the measurements after the first included); the CPU's ceilings are then measured before it starts, not between repetitions")
	f.StringVar(&o.memProfile, "memprofile", "", "write a heap profile (allocations of every measurement) to this file at the end")
	addModelFlags(f, &o.model, "the vision tower to time: default (the built-in model) or a checkpoint; without it ViT-B/32 with random weights", false)
	o.precision = addPrecisionFlag(f)
	addDeviceFlags(f, &o.device)
	c.RegisterFlagCompletionFunc("only", completeList(func() []string { return append(slices.Clone(benchNames), benchViewMethods...) }))
	return c
}

// benchCalibration is how long each of the CPU's ceilings
// (kernel.PeakGFLOPS, kernel.KernelGFLOPS) is measured for a repetition;
// tests shorten it.
var benchCalibration = 50 * time.Millisecond

// run times the measurements.
func (o *benchOptions) run(args []string) error {
	if len(args) > 0 {
		return usagef("unexpected argument %q", args[0])
	}
	choice, g, err := o.precision.choose(o.device.name)
	if err != nil {
		return err
	}
	release, err := o.device.use(g, o.stderr)
	if err != nil {
		return err
	}
	defer release()
	prec := choice.Precision
	for _, f := range []struct {
		name string
		v    int
	}{{"batch-size", o.batch}, {"reps", o.reps}, {"classes", o.classes}} {
		if f.v < 1 {
			return usagef("--%s %d: must be positive", f.name, f.v)
		}
	}
	if err := o.checkArch(); err != nil {
		return err
	}
	selected := map[string]bool{}
	if o.onlyGiven {
		// Given, the list is checked as eval's lists are: no empty
		// entry, none twice.
		names, err := listFlag(o.only, "measurement")
		if err == nil {
			err = noDuplicates(o.only, "measurement", names)
		}
		if err != nil {
			return usagef("--only %v", err)
		}
		for _, name := range names {
			if !slices.Contains(benchNames, name) && !slices.Contains(benchViewMethods, name) {
				return usagef("--only: unknown measurement %q (want %s)", name, strings.Join(append(slices.Clone(benchNames), benchViewMethods...), ", "))
			}
			selected[name] = true
		}
	}
	// SIGINT or SIGTERM stops the run after the repetition in progress:
	// what was measured is printed, the profiles are written, and the exit
	// status is 130. Building the model, a warm-up run or a repetition is
	// not cut short: a second signal ends the process at once.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		stop()
	}()
	prof, err := createBenchProfiles(o.cpuProfile, o.memProfile)
	if err != nil {
		return err
	}
	if o.memProfile != "" {
		runtime.MemProfileRate = 64 << 10
	}
	stopped, err := o.measure(ctx, prof, selected, prec)
	written, perr := prof.finish()
	if stopped != "" {
		line := "interrupted " + stopped
		if len(written) > 0 {
			line += "; " + strings.Join(written, "; ")
		}
		fmt.Fprintln(o.stderr, line)
	}
	switch {
	case err != nil && perr != nil:
		return fmt.Errorf("%w (and %v)", err, perr)
	case err != nil:
		return err
	case perr != nil:
		return perr
	case stopped != "":
		return errInterrupted // exit status 130
	}
	return nil
}

// checkArch refuses --arch and --model-config where nothing would read
// them: without --model bench times ViT-B/32 with random weights, and the
// built-in model stores its own architecture.
func (o *benchOptions) checkArch() error {
	for _, f := range []struct {
		name, value string
		given       bool
	}{{"arch", o.model.arch, o.archGiven}, {"model-config", o.model.modelConfig, o.modelConfigGiven}} {
		switch {
		case !f.given:
		case o.model.model == "":
			return usagef("--%s needs --model (a checkpoint): without --model bench times ViT-B/32 with random weights, whose architecture is fixed", f.name)
		case isBuiltin(o.model.model):
			return usagef("--%s does not apply to the built-in model (--model %s): it stores its own architecture", f.name, o.model.model)
		case f.value == "":
			return usagef("--%s is empty", f.name)
		}
	}
	return nil
}

// measure builds the model and times the selected measurements, printing
// each one's figures as it ends. Once ctx is done it stops after the
// repetition in progress, prints what it measured, and returns where it
// stopped (with what is above), for "interrupted …".
func (o *benchOptions) measure(ctx context.Context, prof *benchProfiles, selected map[string]bool, prec kernel.Precision) (stopped string, err error) {
	name, cfg, m, err := benchModel(o.model.model, o.model.modelConfig, o.model.arch, o.stderr)
	if err != nil {
		return "", err
	}
	cases, err := benchCases(cfg, m, o.batch, o.classes, prec, autograd.CurrentDevice() != nil)
	if err != nil {
		return "", err
	}
	for _, name := range benchViewMethods {
		if selected[name] {
			c, err := benchViewCase(name, cfg, m, o.classes)
			if err != nil {
				return "", err
			}
			cases = append(cases, c)
		}
	}
	if ctx.Err() != nil {
		return "while the model was built: nothing was measured", nil
	}
	where := fmt.Sprintf("%d threads, GEMM kernel %s", runtime.GOMAXPROCS(0), kernel.Kernel())
	if cpu := report.CurrentEnvironment().CPU; cpu != "" {
		where = cpu + ", " + where
	}
	dev := autograd.CurrentDevice()
	if dev != nil {
		where = "on " + dev.Name()
	}
	fmt.Fprintf(o.stdout, "%s, batch %d, %s\n", name, o.batch, where)
	// On the CPU its ceilings are measured for every repetition, just
	// before it (benchCase.sample). With --cpuprofile they are measured
	// before the profile starts instead, as many times as there are
	// repetitions, so that the profile holds no calibration (pprof cannot
	// pause); the figures say so.
	var ceilings []benchSample
	when := "measured between repetitions"
	if prof.cpu != nil {
		when = "measured before the profiled repetitions"
	}
	for i := 0; i < len(cases) && stopped == ""; i++ {
		b := cases[i]
		if len(selected) > 0 && !selected[b.key] {
			continue
		}
		if ctx.Err() != nil {
			stopped = "before " + b.name + ": what was measured is above"
			break
		}
		images := o.batch
		if b.images > 0 {
			images = b.images
		}
		// The fp32 forward pass and its reduced-precision twin are timed in
		// pairs, back to back, so that both see the same minutes of the
		// machine; the ratio is the median of the pairs' ratios.
		var twin *benchCase
		if b.key == "forward" && b.prec == kernel.FP32 && i+1 < len(cases) && cases[i+1].key == "forward" && cases[i+1].prec != kernel.FP32 {
			twin = &cases[i+1]
			i++
		}
		group := []benchCase{b}
		names := b.name
		if twin != nil {
			group = append(group, *twin)
			names += " and " + twin.name
		}
		for _, c := range group {
			if err := c.warmUp(); err != nil { // packs weights, fills pools
				return "", err
			}
			if _, ok := dev.(kernel.Grapher); ok {
				// A pass without gradients is recorded at its second run
				// (autograd.TowerGraphs): not a timed one.
				if err := c.warmUp(); err != nil {
					return "", err
				}
			}
		}
		if prof.cpu != nil && !prof.profiling {
			if dev == nil {
				for range o.reps {
					if ctx.Err() != nil {
						break
					}
					var x benchSample
					x.peak, x.kern = benchCeilings()
					ceilings = append(ceilings, x)
				}
			}
			if ctx.Err() == nil {
				if err := prof.start(); err != nil {
					return "", err
				}
			}
		}
		samples := make([][]benchSample, len(group))
		if ctx.Err() != nil {
			stopped = "before the first repetition of " + names + ": what was measured is above"
		}
		for r := 0; r < o.reps && stopped == ""; r++ {
			for j, c := range group {
				x, err := c.sample(dev == nil && prof.cpu == nil)
				if err != nil {
					return "", err
				}
				if ceilings != nil {
					x.peak, x.kern = ceilings[r].peak, ceilings[r].kern
				}
				samples[j] = append(samples[j], x)
			}
			if r+1 < o.reps && ctx.Err() != nil {
				stopped = fmt.Sprintf("after %d of %d repetitions of %s: what was measured is above, its figures over those %d", r+1, o.reps, names, r+1)
			}
		}
		for j, c := range group {
			if len(samples[j]) > 0 {
				c.report(o.stdout, images, samples[j], dev != nil, when)
			}
			if c.finish != nil {
				c.finish()
			}
		}
		if twin != nil && len(samples[0]) > 0 {
			ratios := make([]float64, len(samples[0]))
			for r := range ratios {
				ratios[r] = samples[0][r].seconds / samples[1][r].seconds
			}
			fmt.Fprintf(o.stdout, "%-40s = %.2f× the fp32 forward pass above (median of %d ratios of passes timed back to back; GFLOP/s counts the same products as fp32)\n", "", median(ratios), len(ratios))
		}
	}
	if stopped == "" && ctx.Err() != nil {
		stopped = "as the last measurement ended: every measurement is above"
	}
	if _, ok := dev.(kernel.Grapher); ok {
		// Which passes were replayed from a recording (scripts read this).
		s := m.Graphs()
		line := fmt.Sprintf("graphs: passes recorded %d, replayed %d", s.Recorded, s.Replayed)
		if s.Err != nil {
			line += "; a recording failed: " + s.Err.Error()
		}
		fmt.Fprintln(o.stdout, line)
	}
	fmt.Fprintf(o.stdout, "peak resident memory: %s\n", peakRSS())
	return stopped, nil
}

// benchProfiles are the files of --cpuprofile and --memprofile (nil when
// not given).
type benchProfiles struct {
	cpu, mem  *os.File
	profiling bool // the CPU profile has started
}

// createBenchProfiles creates the profiles' files before the
// measurements, so that a path that cannot be written fails at once
// rather than after them.
func createBenchProfiles(cpuPath, memPath string) (*benchProfiles, error) {
	p := &benchProfiles{}
	for _, f := range []struct {
		flag, path string
		f          **os.File
	}{{"cpuprofile", cpuPath, &p.cpu}, {"memprofile", memPath, &p.mem}} {
		if f.path == "" {
			continue
		}
		file, err := os.Create(f.path)
		if err != nil {
			if p.cpu != nil { // not left empty
				p.cpu.Close()
				os.Remove(p.cpu.Name())
			}
			return nil, usagef("--%s: %v", f.flag, err)
		}
		*f.f = file
	}
	return p, nil
}

// start starts the CPU profile, if one was asked for and it has not
// started.
func (p *benchProfiles) start() error {
	if p.cpu == nil || p.profiling {
		return nil
	}
	if err := pprof.StartCPUProfile(p.cpu); err != nil {
		return fmt.Errorf("bench: --cpuprofile: %w", err)
	}
	p.profiling = true
	return nil
}

// finish stops the CPU profile and writes the heap profile (the
// allocations so far), closing both files, and says what it wrote. A CPU
// profile that never started (the run stopped before its first timed
// repetition) is removed rather than left empty.
func (p *benchProfiles) finish() (written []string, err error) {
	if p.cpu != nil {
		path := p.cpu.Name()
		if p.profiling {
			pprof.StopCPUProfile()
			p.profiling = false
			if cerr := p.cpu.Close(); cerr != nil {
				err = fmt.Errorf("bench: --cpuprofile: %w", cerr)
			} else {
				written = append(written, "CPU profile written to "+path)
			}
		} else {
			p.cpu.Close()
			os.Remove(path)
			written = append(written, "no CPU profile: nothing was timed ("+path+" removed)")
		}
	}
	if p.mem != nil {
		runtime.GC() // the profile is as of the last completed collection
		merr := pprof.Lookup("allocs").WriteTo(p.mem, 0)
		if cerr := p.mem.Close(); merr == nil {
			merr = cerr
		}
		if merr != nil {
			err = errors.Join(err, fmt.Errorf("bench: --memprofile: %w", merr))
		} else {
			written = append(written, "heap profile written to "+p.mem.Name())
		}
	}
	return written, err
}

// benchCeilings measures the CPU's FMA peak and the GEMM micro-kernel's
// rate on cache-resident operands, GFLOP/s, for benchCalibration each.
func benchCeilings() (peak, kern float64) {
	return kernel.PeakGFLOPS(benchCalibration), kernel.KernelGFLOPS(benchCalibration)
}

// benchModel is the vision tower to time: a checkpoint's, or ViT-B/32 with
// random weights when path is empty.
func benchModel(path, configPath, arch string, stderr io.Writer) (string, *weights.CLIPConfig, *vit.Model, error) {
	if path == "" {
		cfg := vit.ViTB32()
		m, err := vit.Random(cfg, 1, vit.Options{})
		return "ViT-B/32 vision tower, random weights", cfg, m, err
	}
	b, err := openModel(path, configPath, arch, "", kernel.FP32, stderr)
	if err != nil {
		return "", nil, nil, err
	}
	cm := b.Model
	v := cm.Config.Vision
	name := fmt.Sprintf("vision tower of %s (%d×%d, patch %d, %d blocks of width %d)", path,
		v.ImageSize, v.ImageSize, v.PatchSize, v.Layers, v.Width)
	return name, cm.Config, cm.Vision, nil
}

// benchCase is one measurement: run does the work on one batch, after
// prepare (untimed; nil for none) has set the model up for it; finish
// (nil for none) undoes what prepare set up once the measurement is done.
type benchCase struct {
	key, name string
	prepare   func() error
	run       func() error
	finish    func()
	flops     float64          // GEMM flops per image
	images    int              // images per run, when not the batch size
	prec      kernel.Precision // the linear layers' precision (forward only)
	// phases (nil for none) returns the seconds of each phase of the last
	// run, as the method timed them (tta.Diagnostics.Timings).
	phases func() map[string]float64
}

// benchCases builds the three measurements on random images: the forward
// pass, forward+backward to the LayerNorm parameters, and one SubTTA-MINT
// step with the ImageNet-C preset (R=256, α=0.5, AdamW: two
// forward+backward passes and a third forward) against a random head of
// classes classes.
//
// With prec other than fp32, the forward pass is timed a second time with
// the tower's linear layers in prec, converted in its warm-up run; the
// other measurements convert them back (they record gradients, which run in
// fp32, but SubTTA's last forward pass records none).
//
// On a device (onDevice) the fp32 forward pass is also timed with the
// images held there (autograd.HoldOnDevice, uploaded in the warm-up run):
// the forward pass alone, as PyTorch's forward on a tensor already on the
// GPU, where the first figure includes the upload of every batch, as a
// run over a dataset does; and with the next batch uploaded ahead on
// another goroutine while the pass runs (autograd.DeviceInput.Prefetch,
// as eval's reader does), over two copies of the images in turn: how much
// of the upload the overlap hides, between the two figures. So is the
// SubTTA step, a second time with the next batch uploaded ahead.
func benchCases(cfg *weights.CLIPConfig, m *vit.Model, batch, classes int, prec kernel.Precision, onDevice bool) ([]benchCase, error) {
	v := cfg.Vision
	size := 3 * v.ImageSize * v.ImageSize
	r := rand.New(rand.NewPCG(2, 2))
	px := make([]float32, batch*size)
	for i := range px {
		px[i] = float32(r.NormFloat64())
	}
	images := smat.NewDense[float32](smat.WithShape(batch, size), smat.WithBacking(px))
	grad := make([]float32, batch*cfg.EmbedDim)
	for i := range grad {
		grad[i] = float32(r.NormFloat64())
	}
	use := func(p kernel.Precision) error { // converting takes time: only when it changes
		if p == m.Precision() {
			return nil
		}
		return m.SetPrecision(p)
	}
	in := func(p kernel.Precision) func() error { return func() error { return use(p) } }
	forward := func() error {
		m.SetTrainable(false)
		m.Forward(images, nil)
		return nil
	}
	backward := func() error {
		m.SetTrainable(true)
		defer m.SetTrainable(false)
		f := m.Forward(images, nil)
		f.AccGrad(smat.NewDense[float32](smat.WithShape(batch, cfg.EmbedDim), smat.WithBacking(grad)))
		if err := ag.Backward(f); err != nil {
			return err
		}
		for _, ln := range m.LayerNorms() {
			for _, p := range ln.Parameters() {
				p.ZeroGrad()
			}
		}
		return nil
	}
	preset, err := tta.Lookup("imagenet-c", "subtta-m")
	if err != nil {
		return nil, err
	}
	method, err := preset.New(clip.VisionOnly(cfg, m), tta.Heads{Head: randomHead(r, classes, cfg.EmbedDim)})
	if err != nil {
		return nil, err
	}
	// The step's own timings of its last run, by phase (tta.Diagnostics).
	var phases map[string]float64
	lastPhases := func() map[string]float64 { return phases }
	step := func(x []float32) error {
		res, err := method.Step(x, batch)
		if err == nil {
			phases = res.Diag.Timings
		}
		return err
	}
	subtta := func() error { return step(px) }
	perImage := imageFlops(v)
	fp32 := in(kernel.FP32)
	cases := []benchCase{{key: "forward", name: "forward", prepare: fp32, run: forward, flops: perImage}}
	if prec != kernel.FP32 {
		cases = append(cases, benchCase{key: "forward", name: fmt.Sprintf("forward, %v (%s)", prec, kernel.LowKernel(prec)), prepare: in(prec), run: forward, flops: perImage, prec: prec})
	}
	var aheadCases []benchCase // the SubTTA step's, after the step uploading its batch
	if onDevice {
		var held *autograd.DeviceInput
		cases = append(cases, benchCase{key: "forward", name: "forward, images held on the device", run: forward, flops: perImage,
			prepare: func() error {
				if held == nil {
					held = autograd.HoldOnDevice(images)
				}
				return fp32()
			},
			finish: func() { held.Release(); held = nil }})
		// Two copies of the batch in turn, the next one uploaded while the
		// current one is computed on, as eval's reader feeds the device.
		pair := [2][]float32{px, slices.Clone(px)}
		fwd := &uploadsAhead{pair: pair}
		cases = append(cases, benchCase{key: "forward", name: "forward, next batch uploaded ahead", prepare: fp32, flops: perImage,
			run: func() error {
				return fwd.run(func(x []float32) error {
					m.SetTrainable(false)
					m.Forward(smat.NewDense[float32](smat.WithShape(batch, size), smat.WithBacking(x)), nil)
					return nil
				})
			},
			finish: fwd.finish})
		// The step finds its batch's hold by the pixels' memory.
		ahead := &uploadsAhead{pair: pair}
		aheadCases = append(aheadCases, benchCase{key: "subtta", name: "SubTTA step, next batch uploaded ahead", prepare: fp32, flops: 5 * perImage,
			run: func() error { return ahead.run(step) }, phases: lastPhases, finish: ahead.finish})
	}
	cases = append(cases,
		benchCase{key: "backward", name: "forward+backward (LayerNorm gradients)", prepare: fp32, run: backward, flops: 2 * perImage},
		benchCase{key: "subtta", name: "SubTTA-MINT step (ImageNet-C preset)", prepare: fp32, run: subtta, phases: lastPhases, flops: 5 * perImage},
	)
	return append(cases, aheadCases...), nil
}

// uploadsAhead runs a pass or a step on two copies of a batch's pixels in
// turn, the next copy held on the device (autograd.HoldValues) and
// uploaded on another goroutine (Prefetch) while the current one is
// computed on.
type uploadsAhead struct {
	pair [2][]float32
	k    int                   // the copy of the next run
	cur  *autograd.DeviceInput // pair[k]'s hold, uploaded ahead
}

// run runs f on the current copy while the other one goes up.
func (u *uploadsAhead) run(f func(px []float32) error) error {
	if u.cur == nil {
		u.cur = autograd.HoldValues(u.pair[u.k])
		if err := u.cur.Prefetch(); err != nil {
			return err
		}
	}
	next := autograd.HoldValues(u.pair[1-u.k])
	up := make(chan error, 1)
	go func() { up <- next.Prefetch() }()
	err := f(u.pair[u.k])
	if uerr := <-up; err == nil {
		err = uerr
	}
	u.cur.Release()
	u.cur, u.k = next, 1-u.k
	return err
}

// finish releases the copy uploaded for a run that did not come.
func (u *uploadsAhead) finish() {
	u.cur.Release()
	u.cur = nil
}

// benchSample is one timed repetition of a benchCase.
type benchSample struct {
	seconds    float64            // wall time of the run
	peak, kern float64            // the FMA peak and the micro-kernel's rate measured just before (with --cpuprofile, before the profile started), GFLOP/s (0 on a device)
	idle       float64            // share of the time the cores sat idle
	phases     map[string]float64 // seconds by phase (benchCase.phases)
}

// warmUp prepares b and runs it once untimed: it packs weights and fills
// the pools.
func (b benchCase) warmUp() error {
	if b.prepare != nil {
		if err := b.prepare(); err != nil {
			return err
		}
	}
	return b.run()
}

// sample prepares b (untimed) and times one run, measuring the CPU's
// ceilings (benchCeilings) first if ceilings is set.
//
// The FMA ceiling is measured before every repetition: on a shared machine
// it moves, and the efficiency is only honest against the ceiling of the
// same minutes. (With --cpuprofile, which would profile the measuring too,
// the caller measures them before the profile starts instead.)
//
// So is the micro-kernel's own rate on cache-resident operands
// (kernel.KernelGFLOPS): the fraction of it a figure reaches is the cost of
// everything around the kernel (memory traffic, row-wise passes, idle
// cores), which carries over to other machines, while the kernel's
// fraction of the FMA peak depends on the CPU.
//
// The share of the time the cores sat idle (1 − CPU time / (threads × wall
// time)) shows waits at the ends of parallel sections and serial code. It
// moves with the neighbours too: a core they slow down makes the other wait
// at every barrier.
func (b benchCase) sample(ceilings bool) (benchSample, error) {
	var x benchSample
	if b.prepare != nil {
		if err := b.prepare(); err != nil {
			return x, err
		}
	}
	if ceilings {
		x.peak, x.kern = benchCeilings()
	}
	cpu0, start := cpuSeconds(), time.Now()
	if err := b.run(); err != nil {
		return x, err
	}
	x.seconds = time.Since(start).Seconds()
	if b.phases != nil {
		x.phases = maps.Clone(b.phases())
	}
	if cpu0 >= 0 {
		x.idle = 1 - (cpuSeconds()-cpu0)/(float64(kernel.Threads())*x.seconds)
	}
	return x, nil
}

// report prints the median rate of b's samples on batches of batch images
// with what it is a fraction of, and returns the images per second. On a
// device (onDevice) the CPU's ceilings say nothing, and for a reduced
// precision the fp32 kernel's ceilings say little (the caller prints the
// ratio to fp32): only the rate is printed. when says when the ceilings
// were measured ("measured between repetitions").
func (b benchCase) report(stdout io.Writer, batch int, samples []benchSample, onDevice bool, when string) float64 {
	haveCPU := cpuSeconds() >= 0
	pick := func(f func(benchSample) float64) float64 {
		v := make([]float64, len(samples))
		for i, x := range samples {
			v[i] = f(x)
		}
		return median(v)
	}
	med := pick(func(x benchSample) float64 { return x.seconds })
	peak := pick(func(x benchSample) float64 { return x.peak })
	kern := pick(func(x benchSample) float64 { return x.kern })
	ips := float64(batch) / med
	rate := ips * b.flops / 1e9
	fmt.Fprintf(stdout, "%-40s %7.2f images/s  (median of %d: %.2f s/batch, %.0f GFLOP/s)\n",
		b.name, ips, len(samples), med, rate)
	// Where a step's time went, after the line that scripts read below
	// the rate.
	defer func() {
		if line := phaseLine(samples); line != "" {
			fmt.Fprintf(stdout, "%-40s %s\n", "", line)
		}
	}()
	if onDevice || b.prec != kernel.FP32 {
		return ips
	}
	detail := fmt.Sprintf("= %.0f%% of the %s kernel's %.0f GFLOP/s", 100*rate/kern, kernel.Kernel(), kern)
	if peak > 0 {
		detail += fmt.Sprintf(" and %.0f%% of the %.0f GFLOP/s FMA peak", 100*rate/peak, peak)
	}
	detail += " " + when
	if haveCPU {
		detail += fmt.Sprintf("; cores idle %.1f%% of the time", 100*pick(func(x benchSample) float64 { return x.idle }))
	}
	fmt.Fprintf(stdout, "%-40s %s\n", "", detail)
	return ips
}

// phaseOrder is the order in which a step's phases run (SubTTA's: align,
// adapt, predict); phases not named here follow, sorted.
var phaseOrder = []string{"encode", "align", "adapt", "predict"}

// phaseLine says where a step's time goes: the median milliseconds of each
// phase the method timed, and of what the phases leave of each run, or ""
// when the samples carry no phases. On a device the phases are the host's
// clock around work that waits for the device (each reads a result), so
// they split the device's time as well.
func phaseLine(samples []benchSample) string {
	names := map[string]bool{}
	for _, x := range samples {
		for k := range x.phases {
			names[k] = true
		}
	}
	if len(names) == 0 {
		return ""
	}
	keys := slices.Sorted(maps.Keys(names))
	slices.SortStableFunc(keys, func(a, b string) int {
		ia, ib := slices.Index(phaseOrder, a), slices.Index(phaseOrder, b)
		if ia < 0 {
			ia = len(phaseOrder)
		}
		if ib < 0 {
			ib = len(phaseOrder)
		}
		return ia - ib
	})
	parts := make([]string, 0, len(keys)+1)
	rest := make([]float64, len(samples))
	for i, x := range samples {
		rest[i] = x.seconds
	}
	for _, k := range keys {
		v := make([]float64, len(samples))
		for i, x := range samples {
			v[i] = x.phases[k]
			rest[i] -= v[i]
		}
		parts = append(parts, fmt.Sprintf("%s %.1f", k, 1e3*median(v)))
	}
	parts = append(parts, fmt.Sprintf("outside them %.1f", 1e3*median(rest)))
	return "phases, median ms a batch: " + strings.Join(parts, ", ")
}

// median returns the median of x (the upper one for an even count); it
// sorts x.
func median(x []float64) float64 {
	sort.Float64s(x)
	return x[len(x)/2]
}

// peakRSS formats the process's peak resident set size, or "unknown".
func peakRSS() string {
	kb := maxRSSKiB()
	if kb <= 0 {
		return "unknown"
	}
	return fmt.Sprintf("%.2f GB", float64(kb)*1024/math.Pow(10, 9))
}

// imageFlops is the GEMM flops of one image through the vision tower:
// 2·MACs of the linears, patch embedding and attention products (the
// figure the engineering notes use).
func imageFlops(v weights.VisionConfig) float64 {
	t := v.Grid()*v.Grid() + 1
	w := v.Width
	f := 2 * float64(v.Layers) * (float64(t)*float64(w)*float64(3*w+w+2*v.MLPWidth) + 2*float64(t*t*w))
	return f + 2*float64(t-1)*float64(w)*float64(3*v.PatchSize*v.PatchSize)
}

// randomHead is a zero-shot head of random unit rows (classes×dim).
func randomHead(r *rand.Rand, classes, dim int) *mat.Dense {
	head := make([]float64, classes*dim)
	for i := range head {
		head[i] = r.NormFloat64()
	}
	for c := range classes {
		row := head[c*dim : (c+1)*dim]
		var n float64
		for _, x := range row {
			n += x * x
		}
		for j := range row {
			row[j] /= math.Sqrt(n)
		}
	}
	return mat.NewDense(classes, dim, head)
}

// benchViewCase times a multi-view method with its ImageNet-C preset on
// one image of its views per run (all of them through the tower as one
// batch) against a random head; its flops are those of the views'
// forward passes.
func benchViewCase(name string, cfg *weights.CLIPConfig, m *vit.Model, classes int) (benchCase, error) {
	p, err := tta.Lookup("imagenet-c", name)
	if err != nil {
		return benchCase{}, err
	}
	r := rand.New(rand.NewPCG(3, 3))
	method, err := p.New(clip.VisionOnly(cfg, m), tta.Heads{Head: randomHead(r, classes, cfg.EmbedDim)})
	if err != nil {
		return benchCase{}, err
	}
	mv, ok := method.(tta.MultiView)
	if !ok {
		return benchCase{}, fmt.Errorf("bench: %s is not a multi-view method", name)
	}
	v := mv.Views()
	size := 3 * cfg.Vision.ImageSize * cfg.Vision.ImageSize
	px := make([]float32, v*size)
	for i := range px {
		px[i] = float32(r.NormFloat64())
	}
	fp32 := func() error { return m.SetPrecision(kernel.FP32) } // as --precision's forward left it
	var phases map[string]float64
	run := func() error {
		res, err := mv.StepViews(px, 1, v)
		if err == nil {
			phases = res.Diag.Timings
		}
		return err
	}
	return benchCase{key: name, name: fmt.Sprintf("%s (%d views per image)", name, v), prepare: fp32, run: run,
		phases: func() map[string]float64 { return phases }, flops: float64(v) * imageFlops(cfg.Vision), images: 1}, nil
}
