// Command mksubset writes the evaluation subset embedded in package builtin:
// a balanced, seeded selection of the CIFAR-10 test JPEGs, with their
// original bytes, as an uncompressed tar laid out test/<class>/<file>.
//
//	go run ./builtin/internal/mksubset -src ../shared/assets/cifar10/test-jpg.tar.gz -per-class 200 -out builtin/cifar10-test-2000.tar
package main

import (
	"archive/tar"
	"compress/gzip"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path"
	"slices"
	"strings"
	"time"
)

func main() {
	src := flag.String("src", "", "CIFAR-10 test set as .tar.gz of test/<class>/<file>.jpg")
	out := flag.String("out", "", "tar to write")
	per := flag.Int("per-class", 200, "images per class")
	seed := flag.Uint64("seed", 1, "selection seed")
	flag.Parse()
	if err := run(*src, *out, *per, *seed); err != nil {
		fmt.Fprintln(os.Stderr, "mksubset:", err)
		os.Exit(1)
	}
}

func run(src, out string, per int, seed uint64) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return err
	}
	files := map[string]map[string][]byte{} // class → file → bytes
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		if h.Typeflag != tar.TypeReg || !strings.HasSuffix(h.Name, ".jpg") {
			continue
		}
		class := path.Base(path.Dir(h.Name))
		b, err := io.ReadAll(tr)
		if err != nil {
			return err
		}
		if files[class] == nil {
			files[class] = map[string][]byte{}
		}
		files[class][path.Base(h.Name)] = b
	}
	classes := make([]string, 0, len(files))
	for c := range files {
		classes = append(classes, c)
	}
	slices.Sort(classes)
	o, err := os.Create(out)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(o)
	r := rand.New(rand.NewPCG(seed, 0))
	for _, c := range classes {
		names := make([]string, 0, len(files[c]))
		for n := range files[c] {
			names = append(names, n)
		}
		slices.Sort(names)
		if len(names) < per {
			return fmt.Errorf("class %s has %d images, want %d", c, len(names), per)
		}
		r.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
		pick := names[:per]
		slices.Sort(pick)
		for _, n := range pick {
			b := files[c][n]
			h := &tar.Header{Name: "test/" + c + "/" + n, Mode: 0o644, Size: int64(len(b)), ModTime: time.Unix(0, 0), Format: tar.FormatUSTAR}
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			if _, err := tw.Write(b); err != nil {
				return err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return o.Close()
}
