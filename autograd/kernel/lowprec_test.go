package kernel

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// lowShapes are products of odd shapes: M, N and K not multiples of the
// 12×32 tile (but for two that end on it) or of the k groups (4 for int8, 2 for bf16), K = 1, one row,
// one column, and a ViT-like width.
var lowShapes = []struct{ m, n, k int }{
	{1, 1, 1},
	{1, 33, 7},
	{7, 33, 5},
	{12, 32, 4},
	{9, 31, 3},
	{17, 65, 1},
	{24, 64, 2},
	{100, 70, 129},
	{3, 100, 770},
	{41, 96, 768},
	{200, 40, 66},
}

// withKernel runs f with the int8 or bf16 kernel name selected.
func withKernel(t *testing.T, set func(string) (string, error), name string, f func()) {
	t.Helper()
	prev, err := set(name)
	if err != nil {
		t.Fatal(err)
	}
	defer set(prev)
	f()
}

// lowInputs returns A [m, lda] and W [n, k] with normal values, a bias, and
// C [m, ldc] filled with a sentinel, lda and ldc wider than k and n.
func lowInputs(r *rand.Rand, m, n, k int) (a []float32, lda int, w, bias, c []float32, ldc int) {
	lda, ldc = k+3, n+5
	a = randSlice(r, m*lda)
	for i := 0; i < m; i++ { // a row shifted off zero, as after a GELU
		a[i*lda] += 2
	}
	w = randSlice(r, n*k)
	bias = randSlice(r, n)
	c = make([]float32, m*ldc)
	for i := range c {
		c[i] = 12345
	}
	return
}

func sameBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: element %d = %v, reference %v", what, i, got[i], want[i])
		}
	}
}

// checkPadding fails if a value of c outside the m×n product changed.
func checkPadding(t *testing.T, what string, c []float32, m, n, ldc int) {
	t.Helper()
	for i := range c {
		if i%ldc >= n && c[i] != 12345 {
			t.Fatalf("%s: wrote C[%d, %d] outside the product", what, i/ldc, i%ldc)
		}
	}
}

// TestGemmInt8KernelsMatchReference runs every int8 kernel of this CPU on
// odd shapes, bit for bit against the Go reference of the same integer
// arithmetic, and checks the reference against the dequantised product in
// float64.
func TestGemmInt8KernelsMatchReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, s := range lowShapes {
		a, lda, w, bias, c, ldc := lowInputs(r, s.m, s.n, s.k)
		q, err := QuantizeInt8("w", w, s.n, s.k)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range Int8Kernels() {
			// The Go reference with the activations quantised to the
			// kernel's levels.
			prev, _ := SetInt8Kernel(name)
			levels, w7 := int8Active.levels, int8Active.w7
			goLevels := goInt8Kernel
			goLevels.levels, goLevels.w7 = levels, w7
			int8Active = goLevels
			want := append([]float32(nil), c...)
			GemmInt8(s.m, a, lda, q, bias, want, ldc)
			SetInt8Kernel(prev)
			checkPadding(t, "go", want, s.m, s.n, ldc)
			ref := q
			if w7 {
				ref = q.half()
			}
			checkInt8Reference(t, s.m, s.n, s.k, a, lda, ref, bias, want, ldc, levels)
			got := append([]float32(nil), c...)
			withKernel(t, SetInt8Kernel, name, func() { GemmInt8(s.m, a, lda, q, bias, got, ldc) })
			checkPadding(t, name, got, s.m, s.n, ldc)
			sameBits(t, name, got, want)
		}
	}
	for _, name := range []string{"amx", "avx512vnni", "avxvnni", "avx2"} {
		if !slices.Contains(Int8Kernels(), name) {
			t.Logf("int8 kernel %s: not on this CPU, not tested here", name)
		}
	}
}

// TestGemmInt8Extremes: every kernel gives its reference's bits where the
// sums are largest: activations all at the top code and weights all at
// ±127 (±64 halved), of one sign and of alternating signs, over a
// ViT-sized k: the int16 sums of the AVX2 kernel must not saturate.
func TestGemmInt8Extremes(t *testing.T) {
	const m, n, k = 5, 40, 771
	a := make([]float32, m*k)
	for i := range a {
		a[i] = 3 // one value per row: every code at the top
	}
	for p := 0; p < k; p++ {
		a[4*k+p] = -3 // a row at the bottom code: the zero point at the top
	}
	w := make([]float32, n*k)
	for j := 0; j < n; j++ {
		for p := 0; p < k; p++ {
			switch {
			case j%3 == 0:
				w[j*k+p] = 1
			case j%3 == 1:
				w[j*k+p] = -1
			case p%2 == 0:
				w[j*k+p] = 1
			default:
				w[j*k+p] = -1
			}
		}
	}
	q, err := QuantizeInt8("w", w, n, k)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range Int8Kernels() {
		prev, _ := SetInt8Kernel(name)
		goLevels := goInt8Kernel
		goLevels.levels, goLevels.w7 = int8Active.levels, int8Active.w7
		int8Active = goLevels
		want := make([]float32, m*n)
		GemmInt8(m, a, k, q, nil, want, n)
		SetInt8Kernel(prev)
		got := make([]float32, m*n)
		withKernel(t, SetInt8Kernel, name, func() { GemmInt8(m, a, k, q, nil, got, n) })
		sameBits(t, name, got, want)
		for j := 0; j < n; j++ { // the first row: ±3·k where all signs agree
			if wantV := float32(3 * k); j%3 == 0 && math.Abs(float64(got[j]-wantV)) > 0.02*float64(wantV) {
				t.Fatalf("%s: C[0, %d] = %v, want about %v", name, j, got[j], wantV)
			}
		}
	}
}

// TestInt8Half: the 7-bit weight the AVX2 kernel reads is each value
// halved, rounded to nearest even, with the scale doubled, k padded to an
// even number of groups with zeros.
func TestInt8Half(t *testing.T) {
	for v := -128; v <= 127; v++ {
		if got, want := halfToEven(int8(v)), math.RoundToEven(float64(v)/2); float64(got) != want {
			t.Fatalf("halfToEven(%d) = %d, want %v", v, got, want)
		}
	}
	r := rand.New(rand.NewPCG(17, 18))
	for _, s := range lowShapes {
		q, err := QuantizeInt8("w", randSlice(r, s.n*s.k), s.n, s.k)
		if err != nil {
			t.Fatal(err)
		}
		h := q.half()
		if h.groups%2 != 0 || h.groups < q.groups || h.groups > q.groups+1 {
			t.Fatalf("%v: %d groups halved from %d", s, h.groups, q.groups)
		}
		for j := 0; j < s.n; j++ {
			if h.scale[j] != 2*q.scale[j] {
				t.Fatalf("%v: scale %d = %v, want %v", s, j, h.scale[j], 2*q.scale[j])
			}
			var sum int32
			for p := 0; p < h.groups*4; p++ {
				var want int8
				if p < s.k {
					want = halfToEven(q.at(j, p))
				}
				if got := h.at(j, p); got != want || got > 64 || got < -64 {
					t.Fatalf("%v: value [%d, %d] = %d, want %d", s, j, p, got, want)
				}
				sum += int32(h.at(j, p))
			}
			if h.colSum[j] != sum {
				t.Fatalf("%v: column sum %d = %d, want %d", s, j, h.colSum[j], sum)
			}
		}
		if q.half() != h {
			t.Fatal("half made twice")
		}
	}
}

// checkInt8Reference compares C with Σ_p scale·(q_x − zero)·colScale·q_w +
// bias in float64: the reference's only roundings are of the int32 sum to
// float32, of the scales' product, of the product and of the bias sum.
func checkInt8Reference(t *testing.T, m, n, k int, a []float32, lda int, q *Int8Weight, bias, c []float32, ldc int, levels int32) {
	t.Helper()
	wq := q.Dequantize()
	xq := make([]uint8, k)
	for i := 0; i < m; i++ {
		scale, zero := quantizeRowU8(xq, a[i*lda:i*lda+k], quantGo, levels)
		for j := 0; j < n; j++ {
			var s, abs float64
			for p := 0; p < k; p++ {
				v := float64(int32(xq[p])-zero) * float64(scale) * wq[j*k+p]
				s += v
				abs += math.Abs(v)
			}
			s += float64(bias[j])
			tol := 4*0x1p-24*(abs+math.Abs(float64(bias[j]))) + 1e-30
			if d := math.Abs(float64(c[i*ldc+j]) - s); d > tol {
				t.Fatalf("int8 [%d,%d,%d] C[%d, %d] = %v, dequantised product %v (tolerance %g)", m, n, k, i, j, c[i*ldc+j], s, tol)
			}
		}
	}
}

// bf16Asm lists the bf16 assembly kernels of this CPU.
func bf16Asm() []string {
	return slices.DeleteFunc(BF16Kernels(), func(n string) bool { return LowReference(BF16, n) == "" })
}

// TestGemmBF16KernelsMatchReference: as for int8, with the float64 product
// of the bf16-rounded operands as the check of each Go reference ("go":
// VDPBF16PS's order; "go-amx": TDPBF16PS's), and each assembly kernel bit
// for bit against its own reference.
func TestGemmBF16KernelsMatchReference(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, s := range lowShapes {
		a, lda, w, bias, c, ldc := lowInputs(r, s.m, s.n, s.k)
		b, err := PackBF16("w", w, s.n, s.k)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string][]float32{}
		for _, ref := range []string{"go", "go-amx"} {
			out := append([]float32(nil), c...)
			withKernel(t, SetBF16Kernel, ref, func() { GemmBF16(s.m, a, lda, b, bias, out, ldc) })
			checkPadding(t, ref, out, s.m, s.n, ldc)
			checkBF16Reference(t, ref, s.m, s.n, s.k, a, lda, w, bias, out, ldc)
			want[ref] = out
		}
		for _, name := range bf16Asm() {
			got := append([]float32(nil), c...)
			withKernel(t, SetBF16Kernel, name, func() { GemmBF16(s.m, a, lda, b, bias, got, ldc) })
			checkPadding(t, name, got, s.m, s.n, ldc)
			ref := LowReference(BF16, name)
			sameBits(t, name+" against "+ref, got, want[ref])
		}
	}
	for _, name := range []string{"amx", "avx512bf16"} {
		if !slices.Contains(BF16Kernels(), name) {
			t.Logf("bf16 kernel %s: not on this CPU, not tested here", name)
		}
	}
}

// checkBF16Reference compares C with the float64 product of the rounded
// operands plus the bias, within k + 2 roundings of the sum of magnitudes.
func checkBF16Reference(t *testing.T, what string, m, n, k int, a []float32, lda int, w, bias, c []float32, ldc int) {
	t.Helper()
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var sum, abs float64
			for p := 0; p < k; p++ {
				v := float64(FromBF16(ToBF16(a[i*lda+p]))) * float64(FromBF16(ToBF16(w[j*k+p])))
				sum += v
				abs += math.Abs(v)
			}
			sum += float64(bias[j])
			tol := float64(k+2)*0x1p-24*(abs+math.Abs(float64(bias[j]))) + 1e-30
			if d := math.Abs(float64(c[i*ldc+j]) - sum); d > tol {
				t.Fatalf("bf16 %s [%d,%d,%d]: C[%d, %d] = %v, product of the rounded operands %v", what, m, n, k, i, j, c[i*ldc+j], sum)
			}
		}
	}
}

// TestGemmBF16RoundingOrder pins the order of the float32 additions of
// each reference on products chosen so that orders differ (2²⁴ + 1 is 2²⁴
// after rounding, 2²⁴ + 2 is exact). VDPBF16PS ("go") adds the odd product
// of a pair, then the even one, to one running sum and the bias last;
// TDPBF16PS ("go-amx") starts from the bias and, per 16 pairs, sums the
// even and the odd products apart before adding both to C. Each assembly
// kernel must give its reference's bits. K is 64, two whole chunks of the
// AMX kernel, so that its tiles compute these.
func TestGemmBF16RoundingOrder(t *testing.T) {
	const k = 64
	type term struct {
		p    int
		a, w float32
	}
	cases := []struct {
		name     string
		terms    []term
		bias     float32
		go_, amx float32
	}{
		{"2²⁴+1+1, one pair", []term{{0, 0x1p24, 1}, {2, 1, 1}, {3, 1, 1}}, 0, 0x1p24, 0x1p24},
		{"odd product first", []term{{0, 0x1p24, 1}, {2, 1, 1}, {3, 1, -3}}, 0, 0x1p24 - 2, 0x1p24 - 3},
		{"even product first", []term{{0, 0x1p24, 1}, {2, 1, -3}, {3, 1, 1}}, 0, 0x1p24 - 3, 0x1p24 - 2},
		{"odd products apart", []term{{0, 0x1p24, 1}, {1, 1, 1}, {3, 1, 1}}, 0, 0x1p24, 0x1p24 + 2},
		{"bias first, per instruction", []term{{0, 1, 1}, {32, 1, 1}}, 0x1p24, 0x1p24 + 2, 0x1p24},
		{"products before the bias", []term{{0, 1, 1}, {1, 1, 1}}, 0x1p24, 0x1p24 + 2, 0x1p24 + 2},
		{"subnormal sums flushed", []term{{0, 0x1p-63, 0x1p-63}, {1, 0x1p-64, 0x1p-63}}, 0, 0x1p-126, 0x1p-126},
		{"tiny products", []term{{0, 0x1p-60, 0x1p-60}, {1, 0x1p-70, -0x1p-70}, {2, 0x1p-60, -0x1p-60}}, 0, -1, -1},
	}
	for _, tc := range cases {
		var a, w [k]float32
		for _, x := range tc.terms {
			a[x.p], w[x.p] = x.a, x.w
		}
		b, err := PackBF16("w", w[:], 1, k)
		if err != nil {
			t.Fatal(err)
		}
		bias := []float32{tc.bias}
		want := map[string]float32{}
		for _, ref := range []string{"go", "go-amx"} {
			c := []float32{0}
			withKernel(t, SetBF16Kernel, ref, func() { GemmBF16(1, a[:], k, b, bias, c, 1) })
			want[ref] = c[0]
		}
		if tc.go_ != -1 && (want["go"] != tc.go_ || want["go-amx"] != tc.amx) {
			t.Errorf("%s: references give %v (go) and %v (go-amx), want %v and %v", tc.name, want["go"], want["go-amx"], tc.go_, tc.amx)
		}
		for _, name := range bf16Asm() {
			got := []float32{0}
			withKernel(t, SetBF16Kernel, name, func() { GemmBF16(1, a[:], k, b, bias, got, 1) })
			sameBits(t, tc.name+": "+name, got, []float32{want[LowReference(BF16, name)]})
		}
	}
}

// TestQuantizeInt8Weights: NaN and ±Inf refused with the tensor's name,
// rows of zeros, and random rows over huge and tiny ranges, each value
// within half a step of its quantised value.
func TestQuantizeInt8Weights(t *testing.T) {
	for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
		w := []float32{1, 2, 3, bad, 5, 6}
		_, err := QuantizeInt8("visual.transformer.resblocks.0.mlp.c_fc.weight", w, 2, 3)
		if !errors.Is(err, ErrNonFinite) || !strings.Contains(err.Error(), "visual.transformer.resblocks.0.mlp.c_fc.weight[1, 0]") {
			t.Errorf("QuantizeInt8 with %v: err = %v, want ErrNonFinite naming the tensor and [1, 0]", bad, err)
		}
		if _, err := PackBF16("text.w", w, 2, 3); !errors.Is(err, ErrNonFinite) || !strings.Contains(err.Error(), "text.w[1, 0]") {
			t.Errorf("PackBF16 with %v: err = %v, want ErrNonFinite naming the tensor", bad, err)
		}
	}
	r := rand.New(rand.NewPCG(5, 6))
	for trial := 0; trial < 200; trial++ {
		n, k := 1+r.IntN(40), 1+r.IntN(70)
		w := make([]float32, n*k)
		for j := 0; j < n; j++ {
			mag := math.Pow(10, float64(r.IntN(76)-38)) // 1e-38 … 1e37
			if r.IntN(5) == 0 {
				mag = 0 // a row of zeros
			}
			for p := 0; p < k; p++ {
				w[j*k+p] = float32(r.NormFloat64() * mag)
			}
		}
		if trial == 0 {
			w[0], w[1%len(w)] = math.MaxFloat32, -math.MaxFloat32
		}
		q, err := QuantizeInt8("w", w, n, k)
		if err != nil {
			t.Fatal(err)
		}
		d := q.Dequantize()
		for j := 0; j < n; j++ {
			step := float64(q.scale[j])
			for p := 0; p < k; p++ {
				v := float64(w[j*k+p])
				if e := math.Abs(d[j*k+p] - v); e > 0.5*step*(1+1e-6)+1e-6*math.Abs(v) {
					t.Fatalf("trial %d: w[%d, %d] = %g dequantised %g (step %g)", trial, j, p, v, d[j*k+p], step)
				}
			}
		}
	}
}

// TestQuantizeRowU8 fuzzes the activations' quantisation: zero rows, rows
// of one sign, huge ranges (no overflow of the range), and NaN or Inf
// (scale NaN, so the outputs are NaN as in float32).
func TestQuantizeRowU8(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	q := make([]uint8, 64)
	for trial := 0; trial < 2000; trial++ {
		k := 1 + r.IntN(64)
		x := make([]float32, k)
		mag := math.Pow(10, float64(r.IntN(76)-38))
		shift := float64(r.IntN(3) - 1)
		for p := range x {
			x[p] = float32((r.NormFloat64() + 3*shift) * mag)
		}
		switch trial {
		case 0:
			clear(x)
		case 1:
			x[0], x[k-1] = math.MaxFloat32, -math.MaxFloat32
		}
		levels := int32(255)
		if trial%2 == 1 {
			levels = 127
		}
		scale, zero := quantizeRowU8(q, x, quantGo, levels)
		for _, vec := range quantVecs()[1:] {
			q2 := make([]uint8, k)
			scale2, zero2 := quantizeRowU8(q2, x, vec, levels)
			if math.Float32bits(scale2) != math.Float32bits(scale) || zero2 != zero || string(q2) != string(q[:k]) {
				t.Fatalf("trial %d: quantisation with vector loops %d differs from Go's", trial, vec)
			}
		}
		if math.IsNaN(float64(scale)) || math.IsInf(float64(scale), 0) || zero < 0 || zero > levels {
			t.Fatalf("trial %d: scale %v zero %d", trial, scale, zero)
		}
		for p, v := range x {
			got := float64(scale) * float64(int32(q[p])-zero)
			// A row within 255·2⁻¹²⁶ of zero counts as zeros.
			tol := max(0.5*float64(scale)*(1+1e-5)+1e-6*math.Abs(float64(v)), 255*0x1p-126)
			if e := math.Abs(got - float64(v)); e > tol {
				t.Fatalf("trial %d: x[%d] = %g quantised to %g (scale %g, zero %d)", trial, p, v, got, scale, zero)
			}
		}
	}
	for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(-1))} {
		x := make([]float32, 40)
		for i := range x {
			x[i] = float32(i)
		}
		for _, at := range []int{1, 37} { // in the vector loops' part, and in the tail
			x[at] = bad
			for _, vec := range quantVecs() {
				if scale, _ := quantizeRowU8(q, x, vec, 255); !math.IsNaN(float64(scale)) {
					t.Errorf("row with %v at %d, vector loops %d: scale %v, want NaN", bad, at, vec, scale)
				}
			}
			x[at] = 1
		}
	}
}

// TestGemmLowSpecialRows: a row of zeros gives the bias exactly, a row
// holding NaN gives NaN, the other rows are unaffected.
func TestGemmLowSpecialRows(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	m, n, k := 3, 40, 9
	a := randSlice(r, m*k)
	clear(a[k : 2*k])
	a[2*k+4] = float32(math.NaN())
	w := randSlice(r, n*k)
	bias := randSlice(r, n)
	q, _ := QuantizeInt8("w", w, n, k)
	b, _ := PackBF16("w", w, n, k)
	for _, name := range Int8Kernels() {
		c := make([]float32, m*n)
		withKernel(t, SetInt8Kernel, name, func() { GemmInt8(m, a, k, q, bias, c, n) })
		checkSpecialRows(t, "int8 "+name, c, bias, n)
	}
	for _, name := range BF16Kernels() {
		c := make([]float32, m*n)
		withKernel(t, SetBF16Kernel, name, func() { GemmBF16(m, a, k, b, bias, c, n) })
		checkSpecialRows(t, "bf16 "+name, c, bias, n)
	}
}

func checkSpecialRows(t *testing.T, what string, c, bias []float32, n int) {
	t.Helper()
	for j := 0; j < n; j++ {
		if c[n+j] != bias[j] {
			t.Fatalf("%s: zero row gives %v at %d, want the bias %v", what, c[n+j], j, bias[j])
		}
		if !math.IsNaN(float64(c[2*n+j])) {
			t.Fatalf("%s: NaN row gives %v at %d", what, c[2*n+j], j)
		}
		if math.IsNaN(float64(c[j])) {
			t.Fatalf("%s: finite row gives NaN at %d", what, j)
		}
	}
}

func TestParsePrecision(t *testing.T) {
	for _, p := range []Precision{FP32, BF16, Int8} {
		got, err := ParsePrecision(p.String())
		if err != nil || got != p {
			t.Errorf("ParsePrecision(%q) = %v, %v", p, got, err)
		}
	}
	if _, err := ParsePrecision("fp16"); !errors.Is(err, ErrPrecision) {
		t.Errorf("ParsePrecision(fp16): err = %v", err)
	}
	if err := CheckPrecision(FP32); err != nil {
		t.Error(err)
	}
}

// TestToBF16 checks the rounding to bf16 on values around every tie, the
// largest finite values, subnormals, infinities and NaNs, and the AVX-512
// conversion against the Go one, bit for bit.
func TestToBF16(t *testing.T) {
	cases := []struct {
		x    uint32
		want uint16
	}{
		{0x3f800000, 0x3f80}, // 1
		{0x3f808000, 0x3f80}, // tie, even below
		{0x3f818000, 0x3f82}, // tie, even above
		{0x3f808001, 0x3f81},
		{0x7f7fffff, 0x7f80}, // the largest float32 rounds to +Inf
		{0x7f800000, 0x7f80},
		{0xff800000, 0xff80},
		{0x7fa00000, 0x7fe0}, // a signalling NaN is quieted
		{0x00400000, 0x0000}, // subnormal: zero
		{0x80400000, 0x8000},
		{0x00800000, 0x0080}, // the smallest normal
	}
	for _, c := range cases {
		if got := ToBF16(math.Float32frombits(c.x)); got != c.want {
			t.Errorf("ToBF16(%#08x) = %#04x, want %#04x", c.x, got, c.want)
		}
	}
	r := rand.New(rand.NewPCG(11, 12))
	x := make([]float32, 1000)
	for i := range x {
		x[i] = math.Float32frombits(r.Uint32())
	}
	for i, c := range cases {
		x[i] = math.Float32frombits(c.x)
	}
	want, got := make([]uint16, len(x)), make([]uint16, len(x))
	toBF16Row(want, x, false)
	toBF16Row(got, x, haveQuantizeAVX512 && len(bf16Asm()) > 0)
	for i := range x {
		if got[i] != want[i] {
			t.Fatalf("x = %#08x: VCVTNEPS2BF16 %#04x, ToBF16 %#04x", math.Float32bits(x[i]), got[i], want[i])
		}
	}
}

// FuzzQuantizeRowU8 quantises arbitrary float32 rows (the fuzzer's bytes,
// four per value): the AVX-512 loops agree with Go's bit for bit, a row
// with NaN or ±Inf gets a NaN scale, and every other value is within half
// a step of its quantised value (or the row counts as zeros, all within
// 255·2⁻¹²⁶ of zero).
func FuzzQuantizeRowU8(f *testing.F) {
	f.Add([]byte{0, 0, 128, 63, 0, 0, 0, 192})
	f.Add(make([]byte, 4*37))
	f.Add([]byte{255, 255, 127, 127, 255, 255, 127, 255, 0, 0, 192, 127})
	f.Fuzz(func(t *testing.T, raw []byte) {
		x := make([]float32, len(raw)/4)
		finite := true
		for i := range x {
			x[i] = math.Float32frombits(uint32(raw[4*i]) | uint32(raw[4*i+1])<<8 | uint32(raw[4*i+2])<<16 | uint32(raw[4*i+3])<<24)
			finite = finite && !math.IsNaN(float64(x[i])) && !math.IsInf(float64(x[i]), 0)
		}
		q := make([]uint8, len(x))
		levels := int32(255)
		if len(raw)%2 == 1 {
			levels = 127
		}
		scale, zero := quantizeRowU8(q, x, quantGo, levels)
		for _, vec := range quantVecs()[1:] {
			q2 := make([]uint8, len(x))
			scale2, zero2 := quantizeRowU8(q2, x, vec, levels)
			if math.Float32bits(scale2) != math.Float32bits(scale) || zero2 != zero || string(q2) != string(q) {
				t.Fatalf("quantisation with vector loops %d differs from Go's: %v %d vs %v %d", vec, scale2, zero2, scale, zero)
			}
		}
		if !finite {
			if !math.IsNaN(float64(scale)) {
				t.Fatalf("row with NaN or Inf: scale %v", scale)
			}
			return
		}
		for p, v := range x {
			got := float64(scale) * float64(int32(q[p])-zero)
			tol := max(0.5*float64(scale)*(1+1e-5)+1e-6*math.Abs(float64(v)), 255*0x1p-126)
			if e := math.Abs(got - float64(v)); e > tol {
				t.Fatalf("x[%d] = %g quantised to %g (scale %g, zero %d)", p, v, got, scale, zero)
			}
		}
	})
}

// TestQuantizeInt8Rows: QuantizeInt8 packs exactly QuantizeInt8Rows's
// values and scales (the rule a file's int8 weights follow), a value at
// the row's maximum is ±127, and shapes of every remainder of the panel
// width and of the 4-wide groups read back from the packed layout.
func TestQuantizeInt8Rows(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, s := range []struct{ n, k int }{{1, 1}, {3, 5}, {31, 4}, {32, 7}, {33, 64}, {70, 13}} {
		w := make([]float32, s.n*s.k)
		for i := range w {
			w[i] = float32(r.NormFloat64())
		}
		for p := 0; p < s.k; p++ {
			w[p] = 0 // row 0: zeros
		}
		rows, scales, err := QuantizeInt8Rows("w", w, s.n, s.k)
		if err != nil {
			t.Fatal(err)
		}
		q, err := QuantizeInt8("w", w, s.n, s.k)
		if err != nil {
			t.Fatal(err)
		}
		got, gotScales := q.Unpack()
		if !slices.Equal(got, rows) || !slices.Equal(gotScales, scales) {
			t.Errorf("[%d, %d]: packed weight unpacks to other values or scales than QuantizeInt8Rows gives", s.n, s.k)
		}
		if scales[0] != 0 || slices.ContainsFunc(rows[:s.k], func(v int8) bool { return v != 0 }) {
			t.Errorf("[%d, %d]: a row of zeros has scale %g, values %v", s.n, s.k, scales[0], rows[:s.k])
		}
		for j := 1; j < s.n; j++ {
			row := rows[j*s.k : (j+1)*s.k]
			if slices.Max(row) != 127 && slices.Min(row) != -127 {
				t.Errorf("[%d, %d]: row %d reaches neither ±127: %v", s.n, s.k, j, row)
			}
		}
	}
	if _, _, err := QuantizeInt8Rows("text.w", []float32{1, float32(math.NaN())}, 1, 2); !errors.Is(err, ErrNonFinite) || !strings.Contains(err.Error(), "text.w[0, 1]") {
		t.Errorf("NaN: err = %v, want ErrNonFinite naming text.w[0, 1]", err)
	}
}

// TestGemmBF16ActMatchesUnfused: GemmBF16Act then GemmBF16Rows give, with
// every bf16 kernel and both activations, the bits of GemmBF16, the
// activation over its float32 result, then GemmBF16 again: the fusion
// changes where values are kept, not what is computed.
func TestGemmBF16ActMatchesUnfused(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	for _, s := range lowShapes {
		a, lda, w, bias, _, _ := lowInputs(r, s.m, s.n, s.k)
		w1, err := PackBF16("w1", w, s.n, s.k)
		if err != nil {
			t.Fatal(err)
		}
		n2 := 37
		w2, err := PackBF16("w2", randSlice(r, n2*s.n), n2, s.n)
		if err != nil {
			t.Fatal(err)
		}
		bias2 := randSlice(r, n2)
		for _, name := range BF16Kernels() {
			for _, act := range []Activation{QuickGELUActivation, GELUActivation} {
				withKernel(t, SetBF16Kernel, name, func() {
					hidden := make([]float32, s.m*s.n)
					GemmBF16(s.m, a, lda, w1, bias, hidden, s.n)
					if act == GELUActivation {
						GELU(hidden, hidden)
					} else {
						QuickGELU(hidden, hidden)
					}
					want := make([]float32, s.m*n2)
					GemmBF16(s.m, hidden, s.n, w2, bias2, want, n2)

					rows := GemmBF16Act(s.m, a, lda, w1, bias, act)
					if rows.Rows() != s.m || rows.Cols() != s.n {
						t.Fatalf("GemmBF16Act: %d×%d rows, want %d×%d", rows.Rows(), rows.Cols(), s.m, s.n)
					}
					for i := 0; i < s.m; i++ {
						for j := 0; j < s.n; j++ {
							if got, want := rows.At(i, j), FromBF16(ToBF16(hidden[i*s.n+j])); math.Float32bits(got) != math.Float32bits(want) {
								t.Fatalf("%s %v act %d: rounded activation [%d, %d] = %v, want %v", name, s, act, i, j, got, want)
							}
						}
					}
					got := make([]float32, s.m*n2)
					GemmBF16Rows(rows, w2, bias2, got, n2)
					sameBits(t, fmt.Sprintf("%s %v act %d", name, s, act), got, want)
				})
			}
		}
	}
}

// TestLowArithmetic: records of results name the kernels whose arithmetic
// differs from the AVX-512 kernels' (the AVX2 int8 kernel's 7-bit
// activations and weights, TDPBF16PS's sums), and only those.
func TestLowArithmetic(t *testing.T) {
	cases := []struct {
		prec       Precision
		kern, want string
	}{
		{Int8, "go", ""}, {Int8, "avx512vnni", ""}, {Int8, "amx", ""}, {Int8, "avxvnni", ""}, {Int8, "avx2", "7-bit activations and weights"},
		{BF16, "go", ""}, {BF16, "avx512bf16", ""}, {BF16, "go-amx", "TDPBF16PS sums"}, {BF16, "amx", "TDPBF16PS sums"},
	}
	for _, c := range cases {
		set := SetInt8Kernel
		if c.prec == BF16 {
			set = SetBF16Kernel
		}
		prev, err := set(c.kern)
		if err != nil {
			t.Logf("%v kernel %s: not on this CPU", c.prec, c.kern)
			continue
		}
		got := LowArithmetic(c.prec)
		set(prev)
		if got != c.want {
			t.Errorf("%v on %s: LowArithmetic %q, want %q", c.prec, c.kern, got, c.want)
		}
	}
	if got := LowArithmetic(FP32); got != "" {
		t.Errorf("fp32: %q", got)
	}
}

// TestSelect: Select decides a precision once, naming its kernel and
// arithmetic; an unknown precision is refused, and precisions read and
// write their names as text.
func TestSelect(t *testing.T) {
	c, err := Select(FP32)
	if err != nil || c.ID() != "" || c.Kernel != "" {
		t.Errorf("Select(FP32) = %+v, %v; want no kernel and ID \"\"", c, err)
	}
	if _, err := Select(Precision(7)); !errors.Is(err, ErrPrecision) {
		t.Errorf("Select(7): err = %v, want ErrPrecision", err)
	}
	for _, p := range []Precision{Int8, BF16} {
		c, err := Select(p)
		if CheckPrecision(p) != nil {
			if !errors.Is(err, ErrPrecisionUnsupported) {
				t.Errorf("Select(%v) on a CPU without its kernel: err = %v", p, err)
			}
			continue
		}
		want := p.String()
		if a := LowArithmetic(p); a != "" {
			want += " (" + a + ")"
		}
		if err != nil || c.Kernel != LowKernel(p) || c.ID() != want {
			t.Errorf("Select(%v) = %+v (ID %q), %v; want kernel %s, ID %q", p, c, c.ID(), err, LowKernel(p), want)
		}
	}
	for _, p := range []Precision{FP32, BF16, Int8} {
		b, err := p.MarshalText()
		var q Precision
		if err != nil || q.UnmarshalText(b) != nil || q != p || string(b) != p.String() {
			t.Errorf("%v: text %q (%v), read back %v", p, b, err, q)
		}
	}
	var q Precision
	if err := q.UnmarshalText([]byte("fp16")); !errors.Is(err, ErrPrecision) {
		t.Errorf("fp16: err = %v, want ErrPrecision", err)
	}
}
