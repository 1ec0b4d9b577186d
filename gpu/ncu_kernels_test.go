package gpu_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestNCUKernels runs scripts/ncu_kernels.py, which sums the kernel
// durations of scripts/gpu-run.sh's profile part, on a small ncu CSV (two
// passes of three kernels, with the lines ncu prints before the table): the
// passes counted by the patches kernel, cuBLAS's kernels summed as
// products, the sums and shares a pass; --passes overrides the count.
func TestNCUKernels(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("python3 not found: CI needs it for scripts/ncu_kernels.py")
		}
		t.Skip("no python3 to run scripts/ncu_kernels.py")
	}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"testdata/ncu-sample.csv"}, []string{
			"6 kernels, 1.2 ms; 2 passes (patches), 3 kernels and 0.62 ms a pass",
			"products (cuBLAS, cuBLASLt)                          1.0 a pass      500.0 µs a pass  80.6%",
			"layer_norm_rows                                      1.0 a pass       20.0 µs a pass   3.2%"}},
		{[]string{"--passes", "1", "testdata/ncu-sample.csv"}, []string{
			"1 passes (given), 6 kernels and 1.24 ms a pass",
			"2.0 a pass     1000.0 µs a pass  80.6%"}},
	} {
		out, err := exec.Command(py, append([]string{"../scripts/ncu_kernels.py"}, c.args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("ncu_kernels.py %v: %v\n%s", c.args, err, out)
		}
		for _, w := range c.want {
			if !strings.Contains(string(out), w) {
				t.Errorf("ncu_kernels.py %v: no %q in\n%s", c.args, w, out)
			}
		}
	}
}
