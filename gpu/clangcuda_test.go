//go:build cuda && cgo

package gpu

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestKernelsCompileAsCUDA compiles the CUDA C that NVRTC compiles when a
// device is opened (rowwiseSource and towerSource) as CUDA device code with
// clang, for sm_80, and checks that every kernel the package launches is an
// entry of the PTX under its own, unmangled name.
//
// On a machine without a GPU, TestFakeCUDA runs the same source as C++
// with CUDA's keywords defined away: that cannot see what only a CUDA
// compiler rejects (a call from a kernel to a function that is not
// __device__, a missing extern "C" that mangles a name, a construct g++
// accepts and a CUDA front end does not). This test sees those, before the
// binary reaches a GPU, where a compile error would fail gpu.Open. clang is
// not NVRTC: the two front ends may still differ on what they accept.
//
// Without clang it is skipped, unless CI is set (.ci/run installs Debian's
// clang).
func TestKernelsCompileAsCUDA(t *testing.T) {
	clang, err := exec.LookPath("clang++")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("gpu: clang++ not found: CI needs it to compile the CUDA C (Debian package clang)")
		}
		t.Skip("gpu: no clang++ to compile the CUDA C as CUDA")
	}
	prelude, err := filepath.Abs(filepath.Join("testdata", "nvrtc_prelude.h"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	src, ptx := filepath.Join(dir, "subtta_rowwise.cu"), filepath.Join(dir, "subtta_rowwise.ptx")
	if err := os.WriteFile(src, []byte(rowwiseSource+towerSource+adamSource), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(clang, "-x", "cuda", "--cuda-device-only", "--cuda-gpu-arch=sm_80",
		"-nocudainc", "-nocudalib", "-std=c++17", "-include", prelude, "-S", "-o", ptx,
		// PTX 7.0 (CUDA 11.0), for the warp shuffles' _sync forms: clang
		// without a CUDA installation assumes an older one.
		"-Xclang", "-target-feature", "-Xclang", "+ptx70", src).CombinedOutput()
	if err != nil {
		t.Fatalf("clang++ -x cuda: %v\n%s", err, out)
	}
	if len(out) > 0 {
		t.Logf("clang++ -x cuda:\n%s", out)
	}
	b, err := os.ReadFile(ptx)
	if err != nil {
		t.Fatal(err)
	}
	entries := map[string]bool{}
	for _, m := range regexp.MustCompile(`\.entry\s+([A-Za-z_0-9]+)\(`).FindAllStringSubmatch(string(b), -1) {
		entries[m[1]] = true
	}
	var missing []string
	for _, k := range rowwiseKernels {
		if !entries[k] {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		t.Errorf("kernels launched by package gpu but not entries of the PTX (missing or mangled): %s", strings.Join(missing, ", "))
	}
	if len(entries) != len(rowwiseKernels) {
		t.Errorf("the PTX has %d entries, rowwiseKernels %d: every __global__ function should be listed there", len(entries), len(rowwiseKernels))
	}
}
