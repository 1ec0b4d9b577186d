package eval

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/subtta/subtta/autograd/kernel"
	"github.com/subtta/subtta/report"
)

// TestPrecisionIdentity: the precision is part of a run's identity: an
// fp32 folder is refused in a reduced precision, naming it, and a folder
// of a reduced precision resumes. A folder of an earlier build, which
// named the precision in the model's fingerprint, resumes too, its
// records' digests unchanged.
func TestPrecisionIdentity(t *testing.T) {
	prec := kernel.Int8
	if kernel.CheckPrecision(prec) != nil {
		t.Skip("no int8 kernel on this CPU")
	}
	choice, _ := kernel.Select(prec)
	cfg := smallRun(t, t.TempDir(), "contrast")
	mustRun(t, cfg)
	low := cfg
	low.Precision = prec
	_, err := Run(context.Background(), low, Options{})
	if err == nil || !strings.Contains(err.Error(), "another configuration") || !strings.Contains(err.Error(), "precision") {
		t.Fatalf("an fp32 folder run in %v: %v; want a refusal naming the precision", prec, err)
	}

	low.Out = filepath.Join(t.TempDir(), "int8")
	first := mustRun(t, low)
	if sum := mustRun(t, low); sum.Resumed != 1 || sum.Computed != 0 {
		t.Errorf("rerun in %v: resumed %d, computed %d; want 1 and 0", prec, sum.Resumed, sum.Computed)
	}

	// The earlier build's folder: the precision in the model's field.
	runPath := filepath.Join(low.Out, RunFile)
	b, err := os.ReadFile(runPath)
	if err != nil {
		t.Fatal(err)
	}
	var rf runFile
	if err := json.Unmarshal(b, &rf); err != nil {
		t.Fatal(err)
	}
	if rf.Identity.Precision != choice.ID() {
		t.Fatalf("run.json's precision %q, want %q", rf.Identity.Precision, choice.ID())
	}
	legacy := rf.Identity
	legacy.Model += legacyPrecision + legacy.Precision
	legacy.Precision = ""
	rf.Identity = legacy
	rf.Config.Precision = kernel.FP32
	b, _ = json.Marshal(rf)
	os.WriteFile(runPath, b, 0o644)
	rewriteRecords(t, low.Out, func(r *report.Record) { r.Run = legacy.digest(r.Corruption) })
	if first.Records[0].Run == legacy.digest("contrast") {
		t.Fatal("the legacy digest equals the new one: the test shows nothing")
	}
	if sum := mustRun(t, low); sum.Resumed != 1 || sum.Computed != 0 {
		t.Errorf("a folder of an earlier build in %v: resumed %d, computed %d; want 1 and 0", prec, sum.Resumed, sum.Computed)
	}
}

// TestDevicePrecisionIdentity: a device's arithmetic other than float32
// (Options.DevicePrecision) is part of a run's identity: a folder computed
// without it is refused with it, naming it, and the reverse.
func TestDevicePrecisionIdentity(t *testing.T) {
	cfg := smallRun(t, t.TempDir(), "contrast")
	mustRun(t, cfg)
	_, err := Run(context.Background(), cfg, Options{DevicePrecision: "GPU products in bf16"})
	if err == nil || !strings.Contains(err.Error(), "device_precision") {
		t.Fatalf("an fp32 folder run with the GPU's products in bf16: %v; want a refusal naming device_precision", err)
	}
	bf := cfg
	bf.Out = filepath.Join(t.TempDir(), "bf16")
	if _, err := Run(context.Background(), bf, Options{DevicePrecision: "GPU products in bf16"}); err != nil {
		t.Fatal(err)
	}
	if _, err := Run(context.Background(), bf, Options{}); err == nil || !strings.Contains(err.Error(), "device_precision") {
		t.Fatalf("a bf16 folder run in float32: %v; want a refusal naming device_precision", err)
	}
}
