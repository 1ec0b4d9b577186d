package serve

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/gob"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/subtta/subtta/internal/servicetest"
)

// bigSaved is a saved stream whose body (a state of n bytes, and answers)
// dwarfs its head, as a SubTTA stream's does.
func bigSaved(id string, st stamp, images int64, n int) *savedStream {
	sv := saved(id, st, images)
	sv.Labels, sv.Owner = []string{"cat", "dog", "truck"}, "digest"
	sv.State = make([]byte, n)
	for i := range sv.State {
		sv.State[i] = byte(i * 7)
	}
	return sv
}

// tallyReader counts the bytes read through it. It is not an
// io.ByteReader, so that a gob.Decoder over it would buffer ahead.
type tallyReader struct {
	r io.Reader
	n int
}

func (c *tallyReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// readHead reads a state's bytes up to its head's end and no further, and
// needs none of the body; decodeState needs all of it.
func TestReadHeadReadsOnlyHead(t *testing.T) {
	sv := bigSaved("cam", stamp{Birth: 5, Generation: 9}, 12, 1<<20)
	b, headEnd, err := encodeState(sv)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte(stateMagic)) || headEnd > 1024 || len(b) < 1<<20 {
		t.Fatalf("%d bytes, head ending at %d; want %q first, a head under 1 KiB and the 1 MiB state after", len(b), headEnd, stateMagic)
	}
	r := &tallyReader{r: bytes.NewReader(b)}
	h, err := readHead(r, "cam", "cam.stream")
	if err != nil {
		t.Fatal(err)
	}
	if r.n != headEnd {
		t.Errorf("readHead read %d bytes; the head ends at %d", r.n, headEnd)
	}
	if h.Stamp != sv.Stamp || h.Stats.Images != 12 || h.Owner != "digest" || !slices.Equal(h.Labels, sv.Labels) {
		t.Errorf("head %+v; want the saved stream's", h)
	}
	// The bytes cut after the head: the head alone is read, the whole is not.
	if h, err := readHead(bytes.NewReader(b[:headEnd]), "cam", "cam.stream"); err != nil || h.Stamp != sv.Stamp {
		t.Errorf("the head of bytes cut after it: %+v, %v", h, err)
	}
	if _, err := decodeState(b[:headEnd+100], "cam", "cam.stream"); !errors.Is(err, errBadState) {
		t.Errorf("decoding bytes cut within the body: %v; want errBadState", err)
	}
	whole, err := decodeState(b, "cam", "cam.stream")
	if err != nil || !bytes.Equal(whole.State, sv.State) || whole.Answers[0].Key != "k" || whole.Stamp != sv.Stamp {
		t.Errorf("decoding the whole: %v", err)
	}
	for _, tc := range []struct {
		what string
		b    []byte
	}{
		{"bytes cut within the head", b[:headEnd-1]},
		{"bytes cut within the prefix", b[:prefixLen-1]},
		{"another stream's", mustEncode(t, saved("cam2", sv.Stamp, 1))},
		{"a head longer than the bound", append([]byte(stateMagic), 0xff, 0xff, 0xff, 0xff)},
		{"no bytes", nil},
	} {
		if _, err := readHead(bytes.NewReader(tc.b), "cam", "cam.stream"); !errors.Is(err, errBadState) {
			t.Errorf("%s: %v; want errBadState", tc.what, err)
		}
	}
}

func mustEncode(t *testing.T, sv *savedStream) []byte {
	t.Helper()
	b, _, err := encodeState(sv)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A store's Head, its compare-and-swap and Delete's owner check read the
// head alone: with the state's body damaged (cut after the head), they
// work as on a whole state, while Load says the state is damaged; a save
// on the head's stamp writes a whole state again.
func TestStoreHeadWithoutBody(t *testing.T) {
	for _, tc := range stores {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s := tc.open(t)
			g1 := stamp{Birth: 3, Generation: 1}
			sv := bigSaved("cam", g1, 4, 1<<20)
			if err := s.Save(ctx, sv, nil); err != nil {
				t.Fatal(err)
			}
			b, headEnd, err := encodeState(sv)
			if err != nil {
				t.Fatal(err)
			}
			cut := b[:headEnd+16] // the body's first bytes only
			switch s := s.(type) {
			case *dirStore:
				if err := os.WriteFile(s.path("cam"), cut, 0o644); err != nil {
					t.Fatal(err)
				}
			case *redisStore:
				if err := s.c.HSet(ctx, s.key("cam"), "state", cut).Err(); err != nil {
					t.Fatal(err)
				}
			}
			h, err := s.Head(ctx, "cam")
			if err != nil || h == nil || h.Stamp != g1 || h.Stats.Images != 4 || h.Owner != "digest" {
				t.Fatalf("Head: %+v, %v; want generation 1 with 4 images", h, err)
			}
			if deleted, err := s.Delete(ctx, "cam", func(h *streamHead) bool { return h != nil && h.Owner == "someone else" }); err != nil || deleted {
				t.Fatal(deleted, err)
			}
			if h, err := s.Head(ctx, "cam"); h == nil || err != nil {
				t.Fatalf("after a Delete of another owner's stream: %v, %v; want it kept", h, err)
			}
			other := stamp{Birth: 3, Generation: 7}
			if err := s.Save(ctx, bigSaved("cam", other, 9, 10), &other); !errors.Is(err, errStale) {
				t.Fatalf("a save on another stamp: %v; want errStale", err)
			}
			g2 := stamp{Birth: 3, Generation: 2}
			if err := s.Save(ctx, bigSaved("cam", g2, 6, 1<<20), &g1); err != nil {
				t.Fatalf("a save on the head's stamp: %v", err)
			}
			if sv, err := s.Load(ctx, "cam"); err != nil || sv.Stamp != g2 || sv.Stats.Images != 6 || len(sv.State) != 1<<20 {
				t.Fatalf("after the save: %v", err)
			}
			// Load refuses the state cut after its head, and sets it aside:
			// then Head too says it is damaged.
			cut2 := mustEncode(t, bigSaved("cam", g2, 6, 1<<20))
			cut2 = cut2[:len(cut2)-100]
			switch s := s.(type) {
			case *dirStore:
				err = os.WriteFile(s.path("cam"), cut2, 0o644)
			case *redisStore:
				err = s.c.HSet(ctx, s.key("cam"), "state", cut2).Err()
			}
			if err != nil {
				t.Fatal(err)
			}
			// Peek says so too, and sets nothing aside.
			for range 2 {
				if _, err := s.Peek(ctx, "cam"); !errors.Is(err, errBadState) {
					t.Fatalf("Peek of a state cut within its body: %v; want errBadState", err)
				}
			}
			if h, err := s.Head(ctx, "cam"); err != nil || h == nil || h.Stamp != g2 {
				t.Fatalf("Head after Peek: %+v, %v; want the state in place", h, err)
			}
			if _, err := s.Load(ctx, "cam"); !errors.Is(err, errBadState) {
				t.Fatalf("Load of a state cut within its body: %v; want errBadState", err)
			}
			if h, err := s.Head(ctx, "cam"); !errors.Is(err, errBadState) {
				t.Fatalf("Head after Load set the state aside: %+v, %v; want errBadState", h, err)
			}
		})
	}
}

// legacyBytes is sv as the earlier format wrote it.
func legacyBytes(t *testing.T, sv *savedStream) []byte {
	t.Helper()
	old := legacyStream{Format: legacyFormat, ID: sv.ID, ModelVersion: sv.ModelVersion, Dataset: sv.Dataset,
		Method: sv.Method, Labels: sv.Labels, Templates: sv.Templates, Stats: sv.Stats, State: sv.State,
		Saved: sv.Saved, Stamp: sv.Stamp, Owner: sv.Owner, Answers: sv.Answers}
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(old); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// testdata/cam-v2.stream was written by the version before stateFormat
// (its dirStore.Save, format subtta-serve-stream-v2). Both stores read it
// (a Redis hash written by that version holds the same bytes in state,
// and no head), and their next save writes the current format.
func TestStoreReadsEarlierFormat(t *testing.T) {
	old, err := os.ReadFile(filepath.Join("testdata", "cam-v2.stream"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.HasPrefix(old, []byte(stateMagic)) {
		t.Fatal("testdata/cam-v2.stream starts with the current format's magic")
	}
	was := stamp{Birth: 77, Generation: 3}
	check := func(what string, sv *savedStream) {
		t.Helper()
		want := streamHead{ID: "cam", ModelVersion: "m1", Dataset: "cifar10", Method: "subtta-m",
			Labels: []string{"cat", "dog", "truck"}, Templates: []string{"a photo of a {}."}, Stamp: was, Owner: "0123abcd",
			Saved: time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)}
		h := sv.streamHead
		if h.ID != want.ID || h.ModelVersion != want.ModelVersion || h.Dataset != want.Dataset || h.Method != want.Method ||
			!slices.Equal(h.Labels, want.Labels) || !slices.Equal(h.Templates, want.Templates) || h.Stamp != want.Stamp ||
			h.Owner != want.Owner || !h.Saved.Equal(want.Saved) ||
			h.Stats.Images != 6 || h.Stats.Batches != 3 || h.Stats.LastLoss["entropy"] != 0.5 {
			t.Errorf("%s: head %+v; want %+v with 6 images in 3 batches", what, h, want)
		}
		if sv.State != nil && (!bytes.Equal(sv.State, []byte{1, 2, 3, 4, 5}) || len(sv.Answers) != 1 ||
			sv.Answers[0].Key != "k1" || !slices.Equal(sv.Answers[0].Logits, []float64{0.5, -1, 2})) {
			t.Errorf("%s: state %v, answers %+v", what, sv.State, sv.Answers)
		}
	}
	if sv, err := decodeState(old, "cam", "cam-v2.stream"); err != nil {
		t.Fatal(err)
	} else {
		check("decodeState", sv)
	}
	for _, tc := range stores {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s := tc.open(t)
			switch s := s.(type) {
			case *dirStore:
				if err := os.WriteFile(s.path("cam"), old, 0o644); err != nil {
					t.Fatal(err)
				}
			case *redisStore:
				if err := s.c.HSet(ctx, s.key("cam"), "stamp", formatStamp(was), "state", old).Err(); err != nil {
					t.Fatal(err)
				}
			}
			h, err := s.Head(ctx, "cam")
			if err != nil || h == nil {
				t.Fatalf("Head: %v, %v", h, err)
			}
			check("Head", &savedStream{streamHead: *h})
			sv, err := s.Load(ctx, "cam")
			if err != nil || sv == nil {
				t.Fatalf("Load: %v, %v", sv, err)
			}
			check("Load", sv)
			if err := s.Save(ctx, sv, &stamp{Birth: 77, Generation: 2}); !errors.Is(err, errStale) {
				t.Fatalf("a save on another stamp: %v; want errStale", err)
			}
			sv.Stamp.Generation++
			sv.Stats.Images++
			if err := s.Save(ctx, sv, &was); err != nil {
				t.Fatalf("a save on the earlier format's stamp: %v", err)
			}
			var now []byte
			switch s := s.(type) {
			case *dirStore:
				now, err = os.ReadFile(s.path("cam"))
			case *redisStore:
				now, err = s.c.HGet(ctx, s.key("cam"), "head").Bytes()
			}
			if err != nil || !bytes.HasPrefix(now, []byte(stateMagic)) {
				t.Fatalf("after the save: %.40q, %v; want the current format", now, err)
			}
			if h, err := s.Head(ctx, "cam"); err != nil || h.Stamp.Generation != 4 || h.Stats.Images != 7 {
				t.Errorf("Head after the save: %+v, %v; want generation 4 with 7 images", h, err)
			}
		})
	}
}

// A Redis hash saved in the current format and then by the earlier
// version (which writes stamp and state, and leaves head as it was): Head
// finds the head's stamp behind the stamp field and reads the state.
func TestRedisHeadBehindStamp(t *testing.T) {
	url, _ := servicetest.Redis(t)
	ctx := context.Background()
	s, err := openRedisStore(ctx, url, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	g1 := stamp{Birth: 7, Generation: 1}
	if err := s.Save(ctx, saved("cam", g1, 2), nil); err != nil {
		t.Fatal(err)
	}
	g2 := stamp{Birth: 7, Generation: 2}
	if err := s.c.HSet(ctx, s.key("cam"), "stamp", formatStamp(g2), "state", legacyBytes(t, saved("cam", g2, 5))).Err(); err != nil {
		t.Fatal(err)
	}
	if h, err := s.Head(ctx, "cam"); err != nil || h.Stamp != g2 || h.Stats.Images != 5 {
		t.Errorf("Head: %+v, %v; want generation 2 with 5 images", h, err)
	}
	if err := s.Save(ctx, saved("cam", stamp{Birth: 7, Generation: 3}, 6), &g2); err != nil {
		t.Fatal(err)
	}
	if b, err := s.c.HGet(ctx, s.key("cam"), "head").Bytes(); err != nil || !bytes.HasPrefix(b, []byte(stateMagic)) {
		t.Fatalf("head after the save: %v", err)
	}
	if err := s.c.Del(ctx, s.key("cam")).Err(); err != nil {
		t.Fatal(err)
	}
	if h, err := s.Head(ctx, "cam"); h != nil || err != nil {
		t.Errorf("Head of a deleted stream: %v, %v", h, err)
	}
	if _, err := s.c.HGet(ctx, s.key("cam"), "state").Bytes(); !errors.Is(err, redis.Nil) {
		t.Errorf("state of a deleted stream: %v", err)
	}
}

// A save's compare-and-swap reads the saved state's head only: the server
// holding a stream saves its next step over a file whose body is cut off
// (reading the stamp in its head). A server that does not hold the
// stream reads the file whole for GET /v1/streams/{id}, as a request to
// the stream would: it answers 500, the state is damaged, rather than the
// counters of the head, and sets nothing aside (a GET changes nothing).
func TestStreamStateHeadOnly(t *testing.T) {
	const size = 2
	batches := batchesOf(images(t, 2*size), size)
	dir := t.TempDir()
	config := func() Config {
		cfg := testConfig(t)
		cfg.BatchSize, cfg.StateDir = size, dir
		return cfg
	}
	a, tsA := startServer(t, config())
	streamBatch(t, tsA, "cam", batches[0])
	path := filepath.Join(dir, "cam.stream")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	h, err := readHead(bytes.NewReader(b), "cam", path)
	if err != nil {
		t.Fatal(err)
	}
	headEnd := prefixLen + int(binary.BigEndian.Uint32(b[len(stateMagic):prefixLen]))
	if len(b) < 100_000 || headEnd > 4096 {
		t.Fatalf("a SubTTA-M stream's file: %d bytes, head %d; want the head a small part of it", len(b), headEnd)
	}
	t.Logf("a SubTTA-M stream's file: %d bytes, of which %d the head", len(b), headEnd)
	if err := os.WriteFile(path, b[:headEnd+16], 0o644); err != nil {
		t.Fatal(err)
	}

	_, tsB := startServer(t, config())
	for i := range 2 {
		r := do(t, http.MethodGet, tsB.URL+"/v1/streams/cam", "", nil)
		if r.status != http.StatusInternalServerError || !strings.Contains(string(r.body), "stream cam: its saved state is damaged") || strings.Contains(string(r.body), dir) {
			t.Fatalf("GET %d from a server without the stream: %d %s; want 500 saying the state is damaged, without the path", i, r.status, r.body)
		}
	}
	if _, err := os.Stat(path + ".damaged"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("after GET: %v; want nothing set aside", err)
	}
	if cut, err := os.ReadFile(path); err != nil {
		t.Fatal(err)
	} else if _, err := decodeState(cut, "cam", path); !errors.Is(err, errBadState) {
		t.Fatalf("reading the cut file whole: %v; want errBadState", err)
	}

	got := streamBatch(t, tsA, "cam", batches[1])
	if got[0].Stream.Batch != 1 {
		t.Fatalf("the next batch is the stream's batch %d; want 1", got[0].Stream.Batch)
	}
	sv, ok := readSaved(t, dir, "cam")
	if !ok || sv.Stats.Images != 2*size || sv.Stamp.Generation != h.Stamp.Generation+1 || sv.Stamp.Birth != h.Stamp.Birth {
		t.Fatalf("saved after the next batch: %+v; want %d images, the next generation", sv.streamHead, 2*size)
	}
	if st, code := streamStatus(t, tsB, "cam"); code != http.StatusOK || st.InMemory || st.Images != 2*size || st.Batches != 2 || st.Method != a.preset.Method || !slices.Equal(st.Labels, h.Labels) {
		t.Errorf("GET after the next batch from a server without the stream: status %d, %+v; want its %d images in 2 batches", code, st, 2*size)
	}
}

// A state file of the earlier format is reported by GET and continued by
// a server exactly as a file of the current format, and rewritten in the
// current format at its next save.
func TestEarlierFormatFileContinues(t *testing.T) {
	const size = 2
	batches := batchesOf(images(t, 2*size), size)
	config := func(dir string) Config {
		cfg := testConfig(t)
		cfg.BatchSize, cfg.StateDir = size, dir
		return cfg
	}
	_, one := startServer(t, config(t.TempDir()))
	var want []ClassifyResponse
	for _, b := range batches {
		want = append(want, streamBatch(t, one, "cam", b)...)
	}

	dir := t.TempDir()
	_, ts := startServer(t, config(dir))
	streamBatch(t, ts, "cam", batches[0])
	ts.Close()
	sv, _ := readSaved(t, dir, "cam")
	path := filepath.Join(dir, "cam.stream")
	if err := os.WriteFile(path, legacyBytes(t, sv), 0o644); err != nil {
		t.Fatal(err)
	}

	_, ts = startServer(t, config(dir))
	if st, code := streamStatus(t, ts, "cam"); code != http.StatusOK || st.InMemory || st.Images != size {
		t.Fatalf("GET of the earlier format's file: status %d, %+v", code, st)
	}
	for k, g := range streamBatch(t, ts, "cam", batches[1]) {
		if w := want[size+k]; !slices.Equal(g.Logits, w.Logits) || g.Stream.Batch != 1 {
			t.Fatalf("image %d: batch %d, logits %v; one server: %v", k, g.Stream.Batch, g.Logits, w.Logits)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil || !bytes.HasPrefix(b, []byte(stateMagic)) {
		t.Fatalf("after the next save: %.40q, %v; want the current format", b, err)
	}
	if now, _ := readSaved(t, dir, "cam"); now.Stats.Images != 2*size || now.Stamp.Generation != sv.Stamp.Generation+1 {
		t.Errorf("saved: %+v", now.streamHead)
	}
}

// BenchmarkDirStore times, on a folder, what GET /v1/streams/{id} reads of
// a stream's state (Head; Load is what it read before the head was read
// alone) and a step's save over the previous state (Save, whose
// compare-and-swap reads the head), for a state of the size of a
// SubTTA-M stream's on the built-in model (150 KB) and on ViT-B/32 (3 MB),
// with the 400 answers kept with the preset's batches of 200.
func BenchmarkDirStore(b *testing.B) {
	for _, size := range []struct {
		name string
		n    int
	}{{"150KB", 150_000}, {"3MB", 3_000_000}} {
		ctx := context.Background()
		s, err := openDirStore(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		sv := bigSaved("cam", stamp{Birth: 1, Generation: 1}, 1, size.n)
		sv.Answers = nil
		for i := range 400 {
			sv.Answers = append(sv.Answers, savedAnswer{Key: fmt.Sprintf("loadtest-%d-cam-%08d", i, i),
				Logits: make([]float64, 10), Batch: int64(i / 200), Size: 200, Position: i % 200, Steps: 1})
		}
		if err := s.Save(ctx, sv, nil); err != nil {
			b.Fatal(err)
		}
		b.Run("Head/"+size.name, func(b *testing.B) {
			for b.Loop() {
				if h, err := s.Head(ctx, "cam"); err != nil || h == nil {
					b.Fatal(h, err)
				}
			}
		})
		b.Run("Load/"+size.name, func(b *testing.B) {
			for b.Loop() {
				if sv, err := s.Load(ctx, "cam"); err != nil || sv == nil {
					b.Fatal(sv, err)
				}
			}
		})
		b.Run("Save/"+size.name, func(b *testing.B) {
			for b.Loop() {
				prev := sv.Stamp
				sv.Stamp.Generation++
				if err := s.Save(ctx, sv, &prev); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// Any bytes are a saved stream or an error (errBadState for bytes that
// are not one), never a panic; a head read from them is that of their
// whole decoding.
func FuzzDecodeState(f *testing.F) {
	valid, _, err := encodeState(bigSaved("cam", stamp{Birth: 1, Generation: 2}, 3, 64))
	if err != nil {
		f.Fatal(err)
	}
	old, _ := os.ReadFile(filepath.Join("testdata", "cam-v2.stream"))
	for _, b := range [][]byte{valid, valid[:prefixLen+10], old, old[:100], []byte(stateMagic), nil} {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		sv, err := decodeState(b, "cam", "cam.stream")
		h, herr := readHead(bytes.NewReader(b), "cam", "cam.stream")
		if herr != nil && !errors.Is(herr, errBadState) {
			t.Fatalf("readHead: %v; want errBadState", herr)
		}
		if err != nil {
			if !errors.Is(err, errBadState) {
				t.Fatalf("decodeState: %v; want errBadState", err)
			}
			return
		}
		if herr != nil || h.Stamp != sv.Stamp || h.ID != sv.ID || h.Stats.Images != sv.Stats.Images {
			t.Fatalf("readHead %+v, %v; decodeState %+v", h, herr, sv.streamHead)
		}
	})
}

// A state in the place of another stream's (a file copied or renamed by
// hand) is refused as not that stream's, the error naming both ids, in
// either format, whole or its head alone.
func TestStateOfAnotherStream(t *testing.T) {
	sv := bigSaved("s1", stamp{Birth: 2, Generation: 3}, 4, 64)
	const want = `it is the state of stream "s1", not of "s2"`
	for _, tc := range []struct {
		format string
		b      []byte
	}{
		{"current", mustEncode(t, sv)},
		{"earlier", legacyBytes(t, sv)},
	} {
		t.Run(tc.format, func(t *testing.T) {
			if _, err := decodeState(tc.b, "s2", "s2.stream"); !errors.Is(err, errBadState) || !strings.Contains(err.Error(), want) {
				t.Errorf("decodeState: %v; want errBadState saying %q", err, want)
			}
			if _, err := readHead(bytes.NewReader(tc.b), "s2", "s2.stream"); !errors.Is(err, errBadState) || !strings.Contains(err.Error(), want) {
				t.Errorf("readHead: %v; want errBadState saying %q", err, want)
			}
		})
	}
}
