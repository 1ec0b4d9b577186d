package main

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/subtta/subtta/autograd/kernel"
	"github.com/subtta/subtta/clip"
	"github.com/subtta/subtta/pretrain"
	"github.com/subtta/subtta/textenc"
	"github.com/subtta/subtta/weights"
)

// BenchmarkBulkEmbedViTB32 compares bulk embedding (decoding, CIFAR
// images resized to 224×224, the forward pass and the writing, the next
// batch decoded during the forward pass) with the forward pass alone on
// the same batches of 64, as `subtta bench --only forward` times it, on
// ViT-B/32 with random weights: bulk-img/s, forward-img/s and their ratio.
// The tower is OpenAI's ViT-B/32 (QuickGELU), the one bench times; open_clip's
// ViT-B-32 with the exact GELU costs about the same (BenchmarkForwardActivation
// in package vit).
//
//	go test -run '^$' -bench BulkEmbedViTB32 -benchtime 1x ./cmd/subtta
func BenchmarkBulkEmbedViTB32(b *testing.B) {
	cfg, err := weights.Arch("ViT-B-32-quickgelu")
	if err != nil {
		b.Fatal(err)
	}
	cfg.Text.VocabSize = textenc.ByteVocabSize // RandomState's tokenizer; the vision tower is ViT-B/32's
	s, err := pretrain.RandomState(cfg, 1)
	if err != nil {
		b.Fatal(err)
	}
	m, err := clip.New(s, cfg, clip.Options{})
	if err != nil {
		b.Fatal(err)
	}
	pre, err := m.Preprocessor()
	if err != nil {
		b.Fatal(err)
	}
	bundle := &clip.Bundle{Model: m, Preprocessor: pre}
	const n, batch = 256, 64
	dir := b.TempDir()
	extractBuiltin(b, dir)
	var list strings.Builder
	set, err := openImageSet(filepath.Join(dir, "cifar10-test-2000.tar.gz"), io.Discard)
	if err != nil {
		b.Fatal(err)
	}
	for _, id := range set.ids[:n] {
		list.WriteString(id + "\n") // test/<class>/<file>, as extracted under dir
	}
	set.close()
	listFile := filepath.Join(dir, "list.txt")
	os.WriteFile(listFile, []byte(list.String()), 0o644)
	set, err = openImageSet(listFile, io.Discard)
	if err != nil {
		b.Fatal(err)
	}
	var batches []imageBatch
	all := readBatches(set, pre, 0, n, batch)
	for {
		bt, ok, err := all.Next()
		if err != nil {
			b.Fatal(err)
		}
		if !ok {
			break
		}
		batches = append(batches, imageBatch{lo: bt.lo, hi: bt.hi, px: slices.Clone(bt.px)}) // the pipe reuses bt
	}
	all.Close()
	// Warm up: the first pass allocates what the later ones reuse.
	if _, err := m.EncodeImage(batches[0].px, batch); err != nil {
		b.Fatal(err)
	}
	var bulk, forward time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		timeBulk := func() {
			out := filepath.Join(dir, "emb")
			os.RemoveAll(out)
			bf := &bulkFlags{images: &listFile, texts: new(string), out: &out, batch: new(int)}
			*bf.batch = batch
			start := time.Now()
			if err := bulkEmbed(bf, bundle, "", kernel.Choice{}, false, io.Discard, io.Discard); err != nil {
				b.Fatal(err)
			}
			bulk += time.Since(start)
		}
		timeForward := func() { // the forward passes alone, on the same batches
			start := time.Now()
			for _, bt := range batches {
				if _, err := m.EncodeImage(bt.px, bt.hi-bt.lo); err != nil {
					b.Fatal(err)
				}
			}
			forward += time.Since(start)
		}
		if i%2 == 0 { // alternate which goes first
			timeBulk()
			timeForward()
		} else {
			timeForward()
			timeBulk()
		}
	}
	imgs := float64(n * b.N)
	b.ReportMetric(imgs/bulk.Seconds(), "bulk-img/s")
	b.ReportMetric(imgs/forward.Seconds(), "forward-img/s")
	b.ReportMetric(forward.Seconds()/bulk.Seconds(), "bulk/forward")
}
