//go:build cuda && cgo && linux

package gpu

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// deviceTests are the tests that need a device.
var deviceTests = []string{"TestUploadDownload", "TestErrorNamesCall", "TestGemmMatchesCPU", "TestGemmBatchedMatchesCPU",
	"TestRowwiseMatchesCPU", "TestTF32Option", "TestBlockMatchesCPU", "TestTrainingBlocksMatchCPU",
	"TestCLIPTinyMatchesCPU", "TestSymEigMatchesCPU", "TestTowerOpsMatchCPU", "TestUploadRing",
	"TestPrecisionMatchesCPU", "TestFusedMatchesCPU", "TestHalfMatchesCPU", "TestGatherRowsMatchesCPU", "TestDgemmMatchesCPU",
	"TestPromptFeaturesMatchCPU", "TestAdamMatchesCPU", "TestSubTTAStepOnDevice", "TestUploadAhead", "TestUploadAheadConcurrent", "TestRunnerUploadsAheadOnDevice",
	"TestTowerGraph", "TestTowerGraphOff", "TestCapture", "TestCaptureWaits", "TestBLASWorkspace"}

// TestFakeCUDA runs the device tests on a machine without CUDA against
// testdata/fakecuda.c, built with gcc as the five libraries: a run of this
// package's cgo code (loading, binding, contexts, the cuBLAS operand swap,
// kernel parameters, errors) end to end, with CPU stand-ins for what runs
// on a GPU. The CUDA C of the row-wise kernels is compiled by g++ as C++
// (testdata/fakecuda_emu.h supplies CUDA's keywords) and run with each
// block's threads as fibers meeting at every __syncthreads: what NVRTC
// alone would reject and what only a GPU's timing shows stay unchecked. The
// tests run in a child process, since the dynamic loader reads
// LD_LIBRARY_PATH at start.
func TestFakeCUDA(t *testing.T) {
	if os.Getenv("SUBTTA_FAKE_CUDA") != "" {
		t.Skip("gpu: the child process of TestFakeCUDA")
	}
	if ok, _ := Available(); ok {
		t.Skip("gpu: a CUDA device is available: the device tests run on it")
	}
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gpu: no gcc to build the fake CUDA libraries")
	}
	gxx, err := exec.LookPath("g++")
	if err != nil {
		t.Skip("gpu: no g++ to compile the CUDA kernels for the fake CUDA")
	}
	emu, err := filepath.Abs(filepath.Join("testdata", "fakecuda_emu.h"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, so := range []string{cudartNames[0], cublasNames[0], nvrtcNames[0], cudaNames[0], solverNames[0]} {
		out, err := exec.Command(gcc, "-shared", "-fPIC", "-O2", "-Wl,-soname,"+so, "-o", filepath.Join(dir, so),
			filepath.Join("testdata", "fakecuda.c"), "-lm").CombinedOutput()
		if err != nil {
			t.Fatalf("gcc %s: %v\n%s", so, err, out)
		}
	}
	cmd := exec.Command(os.Args[0], "-test.run=^("+strings.Join(deviceTests, "|")+")$", "-test.v")
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+dir, "SUBTTA_FAKE_CUDA=1", "FAKECUDA_CXX="+gxx, "FAKECUDA_EMU="+emu)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("device tests on the fake CUDA: %v\n%s", err, out)
	}
	for _, name := range deviceTests {
		if !strings.Contains(string(out), "--- PASS: "+name+" ") {
			t.Errorf("%s did not pass on the fake CUDA", name)
		}
	}
	if t.Failed() || testing.Verbose() {
		t.Logf("%s", out)
	}
}
