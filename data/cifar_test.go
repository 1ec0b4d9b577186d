package data

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// cifarRecords returns n records of labelBytes label bytes (the label,
// preceded for CIFAR-100 by coarse = label/5) and a 32×32 CHW image whose
// red plane is all seed+k, green 100+k, blue 200-k, except red pixel
// (x=1, y=0) = 250 to pin the orientation.
func cifarRecords(labelBytes, n, seed int, labels func(k int) int) []byte {
	var out []byte
	for k := range n {
		l := labels(k)
		if labelBytes == 2 {
			out = append(out, byte(l/5))
		}
		out = append(out, byte(l))
		img := make([]byte, cifarImageBytes)
		for j := range 1024 {
			img[j], img[1024+j], img[2048+j] = byte(seed+k), byte(100+k), byte(200-k)
		}
		img[1] = 250
		out = append(out, img...)
	}
	return out
}

func checkCIFARImage(t *testing.T, ds Dataset, i, seed, k, label int) {
	t.Helper()
	m, l, err := ds.Item(i)
	if err != nil {
		t.Fatal(err)
	}
	if l != label || ds.Label(i) != label {
		t.Errorf("%s: image %d: label %d (Label %d), want %d", ds.Name(), i, l, ds.Label(i), label)
	}
	if m.W != 32 || m.H != 32 {
		t.Fatalf("%s: image %d is %dx%d", ds.Name(), i, m.W, m.H)
	}
	want := [][3]byte{{byte(seed + k), byte(100 + k), byte(200 - k)}, {250, byte(100 + k), byte(200 - k)}}
	for _, px := range []struct{ x, y, w int }{{0, 0, 0}, {1, 0, 1}, {0, 1, 0}, {31, 31, 0}} {
		o := 3 * (px.y*32 + px.x)
		if got := [3]byte(m.Pix[o : o+3]); got != want[px.w] {
			t.Errorf("%s: image %d pixel (%d,%d) = %v, want %v", ds.Name(), i, px.x, px.y, got, want[px.w])
		}
	}
}

func cifar10Members(testN int) []member {
	mod10 := func(k int) int { return k % 10 }
	ms := []member{
		{"cifar-10-batches-bin/batches.meta.txt", []byte("airplane\nautomobile\nbird\ncat\ndeer\ndog\nfrog\nhorse\nship\ntruck\n\n")},
		{"cifar-10-batches-bin/readme.html", []byte("<html>")},
		{"cifar-10-batches-bin/test_batch.bin", cifarRecords(1, testN, 0, mod10)},
	}
	// Out of order in the archive: the reader must order them by number.
	for _, b := range []int{3, 1, 5, 2, 4} {
		ms = append(ms, member{filepath.Join("cifar-10-batches-bin", "data_batch_"+string(rune('0'+b))+".bin"),
			cifarRecords(1, 2, 10*b, func(k int) int { return b + k })})
	}
	return ms
}

func TestCIFAR10(t *testing.T) {
	dir := t.TempDir()
	ms := cifar10Members(12)
	writeTar(t, filepath.Join(dir, "cifar-10-binary.tar.gz"), true, ms)
	writeTree(t, filepath.Join(dir, "extracted"), ms)
	for _, p := range []string{
		filepath.Join(dir, "cifar-10-binary.tar.gz"),
		filepath.Join(dir, "extracted"),
		filepath.Join(dir, "extracted", "cifar-10-batches-bin"),
	} {
		test, err := OpenCIFAR10(p, Test)
		if err != nil {
			t.Fatal(err)
		}
		if test.Len() != 12 || test.Name() != "cifar10-test" || len(test.Classes()) != 10 || test.Classes()[9] != "truck" {
			t.Fatalf("%s: %s with %d images, classes %q", p, test.Name(), test.Len(), test.Classes())
		}
		for _, i := range []int{0, 5, 11} {
			checkCIFARImage(t, test, i, 0, i, i%10)
		}
		train, err := OpenCIFAR10(p, Train)
		if err != nil {
			t.Fatal(err)
		}
		if train.Len() != 10 {
			t.Fatalf("%s: train has %d images, want 10", p, train.Len())
		}
		for b := 1; b <= 5; b++ {
			for k := range 2 {
				checkCIFARImage(t, train, 2*(b-1)+k, 10*b, k, b+k)
			}
		}
		if _, _, err := test.Item(12); err == nil {
			t.Error("Item(12) of 12 images: no error")
		}
		test.Close()
		train.Close()
	}
}

func TestCIFAR100(t *testing.T) {
	dir := t.TempDir()
	fine := make([]byte, 0, 1000)
	for i := range 100 {
		fine = append(fine, []byte("class_"+string(rune('A'+i/10))+string(rune('a'+i%10))+"\n")...)
	}
	coarse := make([]byte, 0, 200)
	for i := range 20 {
		coarse = append(coarse, []byte("super_"+string(rune('a'+i))+"\n")...)
	}
	ms := []member{
		{"cifar-100-binary/fine_label_names.txt", fine},
		{"cifar-100-binary/coarse_label_names.txt", coarse},
		{"cifar-100-binary/train.bin", cifarRecords(2, 4, 50, func(k int) int { return 99 - k })},
		{"cifar-100-binary/test.bin", cifarRecords(2, 3, 0, func(k int) int { return 7 * k })},
	}
	p := filepath.Join(dir, "cifar-100-binary.tar.gz")
	writeTar(t, p, true, ms)
	test, err := OpenCIFAR100(p, Test)
	if err != nil {
		t.Fatal(err)
	}
	train, err := OpenCIFAR100(p, Train)
	if err != nil {
		t.Fatal(err)
	}
	if test.Len() != 3 || train.Len() != 4 || len(test.Classes()) != 100 || len(test.CoarseClasses()) != 20 {
		t.Fatalf("test %d, train %d images, %d classes, %d superclasses", test.Len(), train.Len(), len(test.Classes()), len(test.CoarseClasses()))
	}
	for k := range 3 {
		checkCIFARImage(t, test, k, 0, k, 7*k)
		if test.CoarseLabel(k) != 7*k/5 {
			t.Errorf("test image %d: coarse label %d, want %d", k, test.CoarseLabel(k), 7*k/5)
		}
	}
	for k := range 4 {
		checkCIFARImage(t, train, k, 50, k, 99-k)
	}
	if test.Classes()[99] != "class_Jj" || test.CoarseClasses()[19] != "super_t" {
		t.Errorf("names %q %q", test.Classes()[99], test.CoarseClasses()[19])
	}

	// Without name files, classes are numbers.
	os.Remove(p)
	writeTar(t, p, false, ms[2:])
	test, err = OpenCIFAR100(p, Test)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(test.Classes()[:3], []string{"0", "1", "2"}) || len(test.Classes()) != 100 {
		t.Errorf("classes %q…", test.Classes()[:3])
	}
}

func TestCIFARErrors(t *testing.T) {
	dir := t.TempDir()
	ok := cifar10Members(3)
	write := func(name string, ms []member) string {
		p := filepath.Join(dir, name)
		writeTar(t, p, true, ms)
		return p
	}
	_, err := OpenCIFAR10(filepath.Join(dir, "absent.tar.gz"), Test)
	mustErr(t, err, "absent.tar.gz")

	// A batch that is not whole records.
	bad := slices.Clone(ok)
	bad[2].data = bad[2].data[:len(bad[2].data)-1]
	_, err = OpenCIFAR10(write("short.tar.gz", bad), Test)
	mustErr(t, err, "short.tar.gz", "test_batch.bin", "3073-byte records")

	// A label past the classes.
	bad = slices.Clone(ok)
	bad[2].data = cifarRecords(1, 2, 0, func(k int) int { return 10 * k })
	_, err = OpenCIFAR10(write("label.tar.gz", bad), Test)
	mustErr(t, err, "label.tar.gz", "record 1", "label 10")

	// A missing batch, and CIFAR-100 files read as CIFAR-10.
	_, err = OpenCIFAR10(write("notest.tar.gz", append(slices.Clone(ok[:2]), ok[3:]...)), Test)
	mustErr(t, err, "notest.tar.gz", "test_batch.bin")
	_, err = OpenCIFAR100(write("c10.tar.gz", ok), Test)
	mustErr(t, err, "c10.tar.gz", "test.bin", "cifar100")

	// Wrong number of class names; not an archive at all.
	bad = slices.Clone(ok)
	bad[0].data = []byte("cat\ndog\n")
	_, err = OpenCIFAR10(write("names.tar.gz", bad), Test)
	mustErr(t, err, "names.tar.gz", "batches.meta.txt", "2 names")
	junk := filepath.Join(dir, "junk.tar.gz")
	os.WriteFile(junk, []byte("\x1f\x8bnot gzip at all"), 0o644)
	_, err = OpenCIFAR10(junk, Test)
	mustErr(t, err, "junk.tar.gz")
}
