package gpu

import "testing"

func TestParsePrecision(t *testing.T) {
	for _, c := range []struct {
		name string
		want Precision
		ok   bool
	}{{"fp32", FP32, true}, {"tf32", TF32, true}, {"bf16", BF16, true}, {"fp16", FP16, true},
		{"int8", FP32, false}, {"", FP32, false}, {"BF16", FP32, false}} {
		p, err := ParsePrecision(c.name)
		if (err == nil) != c.ok || c.ok && (p != c.want || p.String() != c.name) {
			t.Errorf("ParsePrecision(%q) = %v, %v; want %v (ok %v)", c.name, p, err, c.want, c.ok)
		}
	}
}

// TestOptionsPrecision: TF32 alone is Precision TF32, and with another
// precision an error rather than one of the two silently.
func TestOptionsPrecision(t *testing.T) {
	for _, c := range []struct {
		o    Options
		want Precision
		ok   bool
	}{{Options{}, FP32, true}, {Options{TF32: true}, TF32, true}, {Options{Precision: BF16}, BF16, true},
		{Options{TF32: true, Precision: TF32}, TF32, true}, {Options{TF32: true, Precision: FP16}, FP16, false},
		{Options{Precision: Precision(9)}, Precision(9), false}} {
		p, err := c.o.precision()
		if (err == nil) != c.ok || c.ok && p != c.want {
			t.Errorf("%+v: %v, %v; want %v (ok %v)", c.o, p, err, c.want, c.ok)
		}
	}
	if p := PrecisionOf(nil); p != FP32 {
		t.Errorf("PrecisionOf(nil) = %v", p)
	}
}
