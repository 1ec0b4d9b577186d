package kernel

import (
	"errors"
	"fmt"
)

// Precision is the arithmetic of a forward pass's linear layers.
type Precision int

const (
	// FP32 is float32 throughout: the default, and the only precision of
	// passes that record gradients.
	FP32 Precision = iota
	// BF16 rounds weights and activations to bfloat16 (to nearest, ties to
	// even) and accumulates their products in float32.
	BF16
	// Int8 quantises weights to signed 8 bits per output channel
	// (symmetric) and activations to unsigned 8 bits per row (asymmetric,
	// with a zero point), accumulates in int32 and dequantises to float32.
	Int8
)

// ErrPrecision is returned for an unknown precision's name.
var ErrPrecision = errors.New("kernel: unknown precision")

// ErrPrecisionUnsupported is returned for a precision this CPU has no
// kernel for.
var ErrPrecisionUnsupported = errors.New("kernel: precision not supported on this CPU")

// ErrNonFinite is returned when a weight to be quantised holds NaN or ±Inf.
var ErrNonFinite = errors.New("kernel: weight is not finite")

// String is the precision's name: "fp32", "bf16" or "int8".
func (p Precision) String() string {
	switch p {
	case FP32:
		return "fp32"
	case BF16:
		return "bf16"
	case Int8:
		return "int8"
	}
	return fmt.Sprintf("Precision(%d)", int(p))
}

// ParsePrecision returns the precision named s ("fp32", "bf16", "int8").
func ParsePrecision(s string) (Precision, error) {
	for _, p := range []Precision{FP32, BF16, Int8} {
		if s == p.String() {
			return p, nil
		}
	}
	return FP32, fmt.Errorf("%w %q (want fp32, bf16 or int8)", ErrPrecision, s)
}

// MarshalText writes the precision's name, so that configurations and
// records hold "int8", not a number.
func (p Precision) MarshalText() ([]byte, error) {
	if p < FP32 || p > Int8 {
		return nil, fmt.Errorf("%w %d", ErrPrecision, int(p))
	}
	return []byte(p.String()), nil
}

// UnmarshalText reads a precision's name (ParsePrecision).
func (p *Precision) UnmarshalText(b []byte) error {
	v, err := ParsePrecision(string(b))
	if err != nil {
		return err
	}
	*p = v
	return nil
}

// Choice is the kernel that runs a precision on this CPU, as Select
// decides it once for a run.
type Choice struct {
	Precision Precision
	// Kernel names the kernel (Int8Kernels, BF16Kernels), "" for FP32.
	Kernel string
	// Arithmetic says how its arithmetic differs from that of the AVX-512
	// kernels (LowArithmetic), "" when it does not.
	Arithmetic string
}

// Select decides how p runs here: the kernel and its arithmetic. It
// returns an error wrapping ErrPrecision for an unknown precision and
// ErrPrecisionUnsupported, naming the instructions missing, when this CPU
// has no assembly kernel for it: there is no fallback to fp32.
func Select(p Precision) (Choice, error) {
	if err := CheckPrecision(p); err != nil {
		return Choice{Precision: p}, err
	}
	return Choice{Precision: p, Kernel: LowKernel(p), Arithmetic: LowArithmetic(p)}, nil
}

// ID names the choice in records of results (eval's identity, embed's
// settings): "" for FP32, the precision's name, and the arithmetic in
// parentheses where it differs from the AVX-512 kernels' ("int8 (7-bit
// activations)"), whose results differ in their last bits.
func (c Choice) ID() string {
	switch {
	case c.Precision == FP32:
		return ""
	case c.Arithmetic != "":
		return c.Precision.String() + " (" + c.Arithmetic + ")"
	}
	return c.Precision.String()
}

// CheckPrecision returns nil when this CPU has an assembly kernel for p
// (fp32 always), else an error wrapping ErrPrecisionUnsupported that names
// the instructions missing. The portable Go kernels of the same arithmetic
// exist for tests, not as a path: they are far slower than fp32.
func CheckPrecision(p Precision) error {
	switch p {
	case FP32:
		return nil
	case Int8:
		if int8Active.ref == "" {
			return fmt.Errorf("%w: int8 needs AVX2 (VPMADDUBSW) or AVX512-VNNI (VPDPBUSD)", ErrPrecisionUnsupported)
		}
	case BF16:
		if bf16Active.ref == "" {
			return fmt.Errorf("%w: bf16 needs AVX512_BF16 (VDPBF16PS) or AMX-BF16 (TDPBF16PS)", ErrPrecisionUnsupported)
		}
	default:
		return fmt.Errorf("%w %d", ErrPrecision, int(p))
	}
	return nil
}

// lowNR is the panel width of the reduced-precision kernels: two registers
// of 16 32-bit lanes.
const lowNR = 32

// lowKernel computes tiles mr×lowNR tiles of C, one below the other, from
// packed panels. Its arguments are in the operands the driver passes.
type lowKernel struct {
	name   string
	mr     int
	levels int32  // int8: the largest code of the activations (255, or 127)
	w7     bool   // int8: reads the weights at 7 bits (Int8Weight.half)
	ref    string // an assembly kernel's Go reference, whose bits it gives; "" for a Go kernel
}

var (
	int8Active = bestInt8Kernel()
	bf16Active = bestBF16Kernel()
)

// Int8Kernels and BF16Kernels list the kernels this CPU can run for each
// precision, best first, then the Go references of the arithmetic: "go"
// (the last), and for bf16 also "go-amx" (see LowReference).
func Int8Kernels() []string { return lowNames(int8Available()) }

// BF16Kernels: see Int8Kernels.
func BF16Kernels() []string { return lowNames(bf16Available()) }

func lowNames(ks []lowKernel) []string {
	var names []string
	for _, k := range ks {
		names = append(names, k.name)
	}
	return names
}

// LowReference names the Go kernel whose results the kernel name of prec
// (Int8 or BF16) gives bit for bit: "go" for every int8 kernel and for
// bf16's avx512bf16, "go-amx" for bf16's amx (TDPBF16PS adds the products
// in another order); "" for a Go kernel or an unknown name.
func LowReference(prec Precision, name string) string {
	ks := int8Available()
	if prec == BF16 {
		ks = bf16Available()
	}
	for _, k := range ks {
		if k.name == name {
			return k.ref
		}
	}
	return ""
}

// LowArithmetic says how the arithmetic of the kernel that runs prec now
// differs from that of the AVX512-VNNI and AVX512_BF16 kernels, or "" when
// it does not: "7-bit activations and weights" for the AVX2 int8 kernel
// ("7-bit activations" for a kernel with 8-bit weights), "TDPBF16PS
// sums" for the AMX bf16 kernel (LowReference). Results then differ in
// their last bits, or more, so records of results (eval's model identity,
// embed's settings) name it; "" keeps the records made before it existed.
func LowArithmetic(prec Precision) string {
	switch prec {
	case Int8:
		switch {
		case int8Active.w7:
			return "7-bit activations and weights"
		case int8Active.levels != 255:
			return "7-bit activations"
		}
	case BF16:
		ref := bf16Active.ref
		if ref == "" { // a Go kernel: its own reference
			ref = bf16Active.name
		}
		if ref == goAMXBF16Kernel.name {
			return "TDPBF16PS sums"
		}
	}
	return ""
}

// LowKernel names the kernel that runs prec (Int8 or BF16) now, "" for
// FP32.
func LowKernel(prec Precision) string {
	switch prec {
	case Int8:
		return int8Active.name
	case BF16:
		return bf16Active.name
	}
	return ""
}

// SetInt8Kernel selects the int8 kernel by name (for tests and benchmarks)
// and returns the previous one's name. Weights packed before stay valid:
// every int8 kernel reads the same layout.
func SetInt8Kernel(name string) (string, error) { return setLow(&int8Active, int8Available(), name) }

// SetBF16Kernel selects the bf16 kernel by name; see SetInt8Kernel.
func SetBF16Kernel(name string) (string, error) { return setLow(&bf16Active, bf16Available(), name) }

func setLow(active *lowKernel, ks []lowKernel, name string) (string, error) {
	for _, k := range ks {
		if k.name == name {
			prev := active.name
			*active = k
			return prev, nil
		}
	}
	return active.name, fmt.Errorf("kernel: reduced-precision kernel %q not available on this CPU (have %v)", name, lowNames(ks))
}

func bestInt8Kernel() lowKernel { return int8Available()[0] }
func bestBF16Kernel() lowKernel { return bf16Available()[0] }

// lowMR is the height of the driver's tiles: one call of a 12-row kernel
// (AVX-512, and the Go references), or four of the AVX2 kernel's 3 rows;
// activations are padded to a multiple of it.
const lowMR = 12

var (
	goInt8Kernel    = lowKernel{name: "go", mr: lowMR, levels: 255}
	goBF16Kernel    = lowKernel{name: "go", mr: lowMR}
	goAMXBF16Kernel = lowKernel{name: "go-amx", mr: lowMR}
)
