package data

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func writeNPYFile(t *testing.T, p, dtype string, shape []int, raw []byte) {
	t.Helper()
	var buf bytes.Buffer
	if err := WriteNPY(&buf, dtype, shape, raw); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// npyWithHeader writes a .npy of the given format version and header
// dict by hand, as other writers (NumPy 2 for v2/v3) lay them out.
func npyWithHeader(t *testing.T, p string, major byte, dict string, raw []byte) {
	t.Helper()
	var b []byte
	b = append(b, npyMagic...)
	b = append(b, major, 0)
	h := dict + "\n"
	if major == 1 {
		b = binary.LittleEndian.AppendUint16(b, uint16(len(h)))
	} else {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(h)))
	}
	b = append(b, h...)
	b = append(b, raw...)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func le(bits int, vals ...int64) []byte {
	var b []byte
	for _, v := range vals {
		switch bits {
		case 8:
			b = append(b, byte(v))
		case 16:
			b = binary.LittleEndian.AppendUint16(b, uint16(v))
		case 32:
			b = binary.LittleEndian.AppendUint32(b, uint32(v))
		case 64:
			b = binary.LittleEndian.AppendUint64(b, uint64(v))
		}
	}
	return b
}

func TestNPYRead(t *testing.T) {
	dir := t.TempDir()
	vals := []int64{0, 1, -2, 99, 7}
	for _, tc := range []struct {
		name   string
		write  func(p string)
		dtype  string
		shape  []int
		values []int
	}{
		{"u1-v1", func(p string) { writeNPYFile(t, p, "|u1", []int{5}, le(8, 0, 1, 254, 99, 7)) }, "|u1", []int{5}, []int{0, 1, 254, 99, 7}},
		{"i8-v1", func(p string) { writeNPYFile(t, p, "<i8", []int{5}, le(64, vals...)) }, "<i8", []int{5}, []int{0, 1, -2, 99, 7}},
		{"i4-2d", func(p string) { writeNPYFile(t, p, "<i4", []int{1, 5}, le(32, vals...)) }, "<i4", []int{1, 5}, []int{0, 1, -2, 99, 7}},
		{"i8-v2", func(p string) {
			npyWithHeader(t, p, 2, "{'descr': '<i8', 'fortran_order': False, 'shape': (5,), }", le(64, vals...))
		}, "<i8", []int{5}, []int{0, 1, -2, 99, 7}},
		{"u1-v3-reordered", func(p string) {
			npyWithHeader(t, p, 3, `{"shape": (5, 1), "fortran_order": False, "descr": "|u1"}`, le(8, 3, 4, 5, 6, 7))
		}, "|u1", []int{5, 1}, []int{3, 4, 5, 6, 7}},
		{"scalar-shape", func(p string) {
			npyWithHeader(t, p, 1, "{'descr': '<i2', 'fortran_order': True, 'shape': (), }", le(16, -3))
		}, "<i2", []int{}, []int{-3}},
	} {
		p := filepath.Join(dir, tc.name+".npy")
		tc.write(p)
		a, err := OpenNPY(p)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if a.Dtype != tc.dtype || !slices.Equal(a.Shape, tc.shape) {
			t.Errorf("%s: dtype %s shape %v, want %s %v", tc.name, a.Dtype, a.Shape, tc.dtype, tc.shape)
		}
		got, err := a.Ints()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, tc.values) {
			t.Errorf("%s: values %v, want %v", tc.name, got, tc.values)
		}
		a.Close()
	}

	// WriteNPY aligns the data to 64 bytes, as NumPy does.
	var buf bytes.Buffer
	if err := WriteNPY(&buf, "|u1", []int{5, 32, 32, 3}, make([]byte, 5*32*32*3)); err != nil {
		t.Fatal(err)
	}
	if hl := 10 + int(binary.LittleEndian.Uint16(buf.Bytes()[8:])); hl%64 != 0 {
		t.Errorf("data starts at byte %d, not a multiple of 64", hl)
	}
	if err := WriteNPY(&buf, "<f4", []int{1}, make([]byte, 4)); err == nil {
		t.Error("WriteNPY <f4: no error")
	}
	if err := WriteNPY(&buf, "|u1", []int{2, 2}, make([]byte, 3)); err == nil {
		t.Error("WriteNPY with 3 bytes for shape [2 2]: no error")
	}
}

func TestNPYErrors(t *testing.T) {
	dir := t.TempDir()
	u8 := func(n int) []byte { return make([]byte, n) }
	for _, tc := range []struct {
		name string
		file []byte // written as is when set
		dict string // else a v1 header
		raw  []byte
		want string
	}{
		{name: "empty", file: []byte{}, want: "not a .npy file"},
		{name: "magic", file: []byte("PK\x03\x04 zip file...."), want: "bad magic"},
		{name: "version", file: append(slices.Clone(npyMagic), 9, 0, 0, 0), want: "version 9.0"},
		{name: "truncated-header", file: append(slices.Clone(npyMagic), 1, 0, 200, 0, '{'), want: "truncated"},
		{name: "float", dict: "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", raw: u8(8), want: `dtype "<f4"`},
		{name: "big-endian", dict: "{'descr': '>i8', 'fortran_order': False, 'shape': (1,), }", raw: u8(8), want: `">i8"`},
		{name: "fortran", dict: "{'descr': '|u1', 'fortran_order': True, 'shape': (2, 2), }", raw: u8(4), want: "Fortran"},
		{name: "short-data", dict: "{'descr': '|u1', 'fortran_order': False, 'shape': (10, 3), }", raw: u8(29), want: "needs"},
		{name: "long-data", dict: "{'descr': '|u1', 'fortran_order': False, 'shape': (10, 3), }", raw: u8(31), want: "needs"},
		{name: "no-shape", dict: "{'descr': '|u1', 'fortran_order': False, }", raw: u8(1), want: `missing key "shape"`},
		{name: "bad-dim", dict: "{'descr': '|u1', 'fortran_order': False, 'shape': (2, x), }", raw: u8(1), want: "bad dimension"},
		{name: "huge", dict: "{'descr': '<i8', 'fortran_order': False, 'shape': (4611686018427387904, 4), }", raw: u8(1), want: "bad .npy shape"},
		{name: "not-dict", dict: "[1, 2]", raw: u8(1), want: "want a dict"},
	} {
		p := filepath.Join(dir, tc.name+".npy")
		if tc.file != nil {
			os.WriteFile(p, tc.file, 0o644)
		} else {
			npyWithHeader(t, p, 1, tc.dict, tc.raw)
		}
		_, err := OpenNPY(p)
		mustErr(t, err, p, tc.want)
	}
	_, err := OpenNPY(filepath.Join(dir, "absent.npy"))
	mustErr(t, err, "absent.npy")
}

// FuzzNPYHeader checks that no header makes the parser panic.
func FuzzNPYHeader(f *testing.F) {
	f.Add("{'descr': '|u1', 'fortran_order': False, 'shape': (50000, 32, 32, 3), }")
	f.Add(`{"descr": "<i8", "fortran_order": True, "shape": (3L,)}`)
	f.Add("{'shape': ((")
	f.Fuzz(func(t *testing.T, h string) {
		descr, _, shape, err := parseNPYHeader(h)
		if err == nil && strings.Contains(fmt.Sprint(shape), "-") {
			t.Errorf("negative dimension accepted: %q → %s %v", h, descr, shape)
		}
	})
}

// cifarCDir writes a CIFAR-C folder of 5×perSev H×W images whose pixels are
// all their row number, with labels (row*3) % classes, as int64.
func cifarCDir(t *testing.T, dir string, perSev, h, w, classes int, corruptions ...string) {
	t.Helper()
	n := 5 * perSev
	raw := make([]byte, n*h*w*3)
	labels := make([]int64, n)
	for r := range n {
		for j := range h * w * 3 {
			raw[r*h*w*3+j] = byte(r)
		}
		raw[r*h*w*3+2] = 200 // the blue channel of pixel (0, 0)
		labels[r] = int64(r*3) % int64(classes)
	}
	for _, c := range corruptions {
		writeNPYFile(t, filepath.Join(dir, c+".npy"), "|u1", []int{n, h, w, 3}, raw)
	}
	writeNPYFile(t, filepath.Join(dir, "labels.npy"), "<i8", []int{n}, le(64, labels...))
}

func TestCIFARC(t *testing.T) {
	dir := t.TempDir()
	const perSev, h, w = 4, 3, 2
	cifarCDir(t, dir, perSev, h, w, 10, "gaussian_noise", "speckle_noise")
	classes := []string{"airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"}
	for _, corruption := range []string{"gaussian_noise", "speckle_noise"} {
		for sev := 1; sev <= 5; sev++ {
			ds, err := OpenCIFARC(dir, corruption, sev, classes)
			if err != nil {
				t.Fatal(err)
			}
			if ds.Len() != perSev || ds.Name() != fmt.Sprintf("%s/%d", corruption, sev) || len(ds.Classes()) != 10 {
				t.Fatalf("%s: %d images, %d classes", ds.Name(), ds.Len(), len(ds.Classes()))
			}
			for i := range perSev {
				row := perSev*(sev-1) + i
				m, l, err := ds.Item(i)
				if err != nil {
					t.Fatal(err)
				}
				if m.W != w || m.H != h || l != row*3%10 || ds.Label(i) != l {
					t.Errorf("%s image %d: %dx%d label %d, want %dx%d label %d", ds.Name(), i, m.W, m.H, l, w, h, row*3%10)
				}
				if m.Pix[0] != byte(row) || m.Pix[2] != 200 || m.Pix[len(m.Pix)-1] != byte(row) {
					t.Errorf("%s image %d: pixels %v, want row %d", ds.Name(), i, m.Pix, row)
				}
			}
			if _, _, err := ds.Item(perSev); err == nil {
				t.Errorf("%s: Item(%d) past the end: no error", ds.Name(), perSev)
			}
			ds.Close()
		}
	}
	// Without class names, the labels name the classes.
	ds, err := OpenCIFARC(dir, "gaussian_noise", 5, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()
	if max := slices.Max([]int{ds.Label(0), ds.Label(1), ds.Label(2), ds.Label(3)}); len(ds.Classes()) != max+1 {
		t.Errorf("%d numeric classes, want %d", len(ds.Classes()), max+1)
	}
}

func TestCIFARCErrors(t *testing.T) {
	dir := t.TempDir()
	cifarCDir(t, dir, 2, 4, 4, 10, "gaussian_noise")
	ten := make([]string, 10)

	_, err := OpenCIFARC(filepath.Join(dir, "absent"), "gaussian_noise", 5, nil)
	mustErr(t, err, "absent")
	_, err = OpenCIFARC(dir, "gaussian_nosie", 5, nil)
	mustErr(t, err, "unknown corruption", `"gaussian_nosie"`, "shot_noise")
	_, err = OpenCIFARC(dir, "fog", 5, nil)
	mustErr(t, err, "fog.npy", "gaussian_noise")
	_, err = OpenCIFARC(dir, "../x", 5, nil)
	mustErr(t, err, "invalid corruption")
	for _, sev := range []int{0, 6} {
		_, err = OpenCIFARC(dir, "gaussian_noise", sev, nil)
		mustErr(t, err, fmt.Sprintf("severity %d", sev))
	}
	// Too few classes for the labels (which go up to 9).
	_, err = OpenCIFARC(dir, "gaussian_noise", 2, ten[:5])
	mustErr(t, err, "labels.npy", "outside the 5 classes")

	for _, tc := range []struct {
		name  string
		dtype string
		shape []int
	}{
		{"hwc-missing", "|u1", []int{10, 4, 4}},
		{"chw", "|u1", []int{10, 3, 4, 4}},
		{"not-5n", "|u1", []int{9, 4, 4, 3}},
		{"int64", "<i8", []int{10, 4, 4, 3}},
	} {
		n := 1
		for _, d := range tc.shape {
			n *= d
		}
		size, _ := npyItemSize(tc.dtype)
		writeNPYFile(t, filepath.Join(dir, "fog.npy"), tc.dtype, tc.shape, make([]byte, n*size))
		_, err := OpenCIFARC(dir, "fog", 1, ten)
		mustErr(t, err, "fog.npy", fmt.Sprint(tc.shape), "[5n, H, W, 3]")
	}
	// Labels that do not match the images.
	writeNPYFile(t, filepath.Join(dir, "labels.npy"), "<i8", []int{5}, make([]byte, 40))
	_, err = OpenCIFARC(dir, "gaussian_noise", 1, ten)
	mustErr(t, err, "labels.npy", "[5]")
}
