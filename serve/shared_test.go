package serve

import (
	"context"
	"errors"
	"fmt"
	"github.com/subtta/subtta/serve/loadtest"
	"os"
	"path/filepath"
	"time"

	"github.com/subtta/subtta/internal/filelock"
	"github.com/subtta/subtta/internal/servicetest"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"testing"
)

// savedStats reads a stream's counters from its state file through s.
func savedStats(t *testing.T, s *Server, id string) streamStats {
	t.Helper()
	sv, err := s.readState(id)
	if err != nil || sv == nil {
		t.Fatalf("stream %s: saved state %v, %v", id, sv, err)
	}
	return sv.Stats
}

// Two servers on one state directory take turns on a stream, each still
// holding the stream in memory from its last turn: every step continues
// from the other's last save, bit for bit as one server stepping every
// batch, and the saved stream counts every image answered.
func TestTwoServersShareStateDir(t *testing.T) { twoServersShareStore(t, t.TempDir()) }

// The same with a Redis store (a real redis-server, started here).
func TestTwoServersShareRedis(t *testing.T) {
	url, _ := servicetest.Redis(t)
	twoServersShareStore(t, url)
}

// twoServersShareStore runs TestTwoServersShareStateDir's turns on two
// servers sharing the store named by store (Config.StateStore).
func twoServersShareStore(t *testing.T, store string) {
	const size = 2
	batches := batchesOf(images(t, 6*size), size)
	config := func(dir string) Config {
		cfg := testConfig(t)
		cfg.BatchSize, cfg.StateStore = size, dir
		return cfg
	}
	_, one := startServer(t, config(t.TempDir()))
	var want []ClassifyResponse
	for _, b := range batches {
		want = append(want, streamBatch(t, one, "cam", b)...)
	}

	a, tsA := startServer(t, config(store))
	_, tsB := startServer(t, config(store))
	// a's copy is stale at batches 2 and 5, b's at batch 4.
	for i, ts := range []*httptest.Server{tsA, tsB, tsA, tsA, tsB, tsA} {
		got := streamBatch(t, ts, "cam", batches[i])
		for k, g := range got {
			if w := want[i*size+k]; !slices.Equal(g.Logits, w.Logits) || g.Stream.Batch != int64(i) {
				t.Fatalf("batch %d, image %d: batch index %d, logits %v; one server: %v", i, k, g.Stream.Batch, g.Logits, w.Logits)
			}
		}
		// Both servers report the newest counters.
		for name, ts := range map[string]*httptest.Server{"a": tsA, "b": tsB} {
			if st, code := streamStatus(t, ts, "cam"); code != http.StatusOK || st.Images != int64((i+1)*size) {
				t.Errorf("after batch %d, server %s reports %d images (status %d); want %d", i, name, st.Images, code, (i+1)*size)
			}
		}
	}
	if st := savedStats(t, a, "cam"); st.Images != int64(len(want)) || st.Batches != int64(len(batches)) {
		t.Errorf("saved stream: %d images in %d batches; answered %d in %d", st.Images, st.Batches, len(want), len(batches))
	}
}

// readSaved decodes a stream's state file in dir.
func readSaved(t *testing.T, dir, id string) (*savedStream, bool) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, id+".stream"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	sv, err := decodeState(b, id, id+".stream")
	if err != nil {
		t.Fatal(err)
	}
	return sv, true
}

// Two server processes on one state directory under load on the same
// streams; one of them dies (SIGKILL, sent to itself) right after saving a
// batch, before answering it, and is started again on its address, while
// its load test sends the requests that got no answer again, with their
// Idempotency-Key. Every stream's saved image count equals its answered
// requests: the batch saved but not answered is answered from the saved
// state (replayed), not adapted on again, and no answered adaptation is
// lost.
func TestServerProcessesShareStateDir(t *testing.T) {
	if !filelock.Supported {
		t.Skip("no file locks on this system: two processes are not kept apart")
	}
	const streams, requests = 3, 16
	dir := t.TempDir()
	addrB := servicetest.FreeAddr(t)
	a := startChild(t, dir)
	b := startChild(t, dir, childAddr+"="+addrB, childCrashAfter+"=6")
	imgs := images(t, 64)
	load := func(url string, n int) func() (*loadtest.Report, error) {
		return func() (*loadtest.Report, error) {
			return loadtest.Config{URL: url, Sources: streams, Requests: n, Concurrency: 2, Duration: time.Minute,
				StreamPrefix: "s", Shared: true, Images: imgs}.Run(context.Background())
		}
	}
	type result struct {
		rep *loadtest.Report
		err error
	}
	run := func(f func() (*loadtest.Report, error)) chan result {
		c := make(chan result, 1)
		go func() { r, err := f(); c <- result{r, err} }()
		return c
	}
	fromA, fromB := run(load(a.url, 2*requests)), run(load(b.url, requests))
	select {
	case <-b.p.Done():
	case <-time.After(time.Minute):
		t.Fatal("the server process did not save 6 batches within a minute")
	}
	t.Logf("server b ended (%v) after its 6th save; starting it again on %s", b.p.Err(), addrB)
	b2 := startChild(t, dir, childAddr+"="+addrB)
	var reports []*loadtest.Report
	for _, c := range []chan result{fromA, fromB} {
		r := <-c
		if r.err != nil {
			t.Fatal(r.err)
		}
		reports = append(reports, r.rep)
	}
	for name, c := range map[string]*child{"a": a, "b, restarted": b2} {
		u, _ := url.Parse(c.url)
		n, _ := loadtest.Metric(context.Background(), http.DefaultClient, u, "subtta_state_save_conflicts_total")
		t.Logf("server %s: %v saves found the stream saved by the other since it read it", name, n)
	}
	a.stop(t)
	b2.stop(t)
	for i, r := range reports {
		if !r.ExactlyOnce || r.Errors > 0 {
			t.Errorf("load test %d: %d errors %v; %v", i, r.Errors, r.ByStatus, r.Problems)
		}
	}
	if killed := reports[1]; killed.Retried == 0 || killed.Replayed == 0 {
		t.Errorf("the killed server's load test sent %d requests again, %d answered from the saved state; want some of each (its last batch was saved, not answered)",
			killed.Retried, killed.Replayed)
	} else {
		t.Logf("the killed server's load test sent %d requests again, %d answered from the saved state", killed.Retried, killed.Replayed)
	}
	for i := range streams {
		id := fmt.Sprintf("s%d", i)
		answered := 0
		for _, r := range reports {
			answered += r.OKByStream[id]
		}
		sv, ok := readSaved(t, dir, id)
		if !ok {
			t.Errorf("stream %s: no saved state", id)
			continue
		}
		if got := int(sv.Stats.Images); got != answered {
			t.Errorf("stream %s: saved %d images for %d answers", id, got, answered)
		} else {
			t.Logf("stream %s: saved %d images for %d answers, generation %d", id, got, answered, sv.Stamp.Generation)
		}
	}
}

// A stream created at once by two servers with other labels: the second
// to save cannot step its batch on the first's stream, whose labels are
// not its requests'; they get 409, and the stream, loaded anew, goes on
// from the first's save.
func TestTwoServersCreateStreamWithOtherLabels(t *testing.T) {
	dir := t.TempDir()
	cfgA, cfgB := testConfig(t), testConfig(t)
	cfgA.BatchSize, cfgA.StateDir = 1, dir
	cfgB.BatchSize, cfgB.StateDir = 2, dir
	_, tsA := startServer(t, cfgA)
	_, tsB := startServer(t, cfgB)
	imgs := images(t, 5)
	first := make(chan reply, 1)
	go func() { _, r := classify(t, tsB, "?stream=x&labels=a,b,c", imgs[0]); first <- r }()
	waitPending(t, tsB, "x", 1) // b holds x with its labels, unsaved
	if got, r := classify(t, tsA, "?stream=x&labels=cat,dog,truck", imgs[1]); r.status != http.StatusOK || got.Stream.Batch != 0 {
		t.Fatalf("a: %d %s", r.status, r.body)
	}
	_, second := classify(t, tsB, "?stream=x&labels=a,b,c", imgs[2])
	for _, r := range []reply{<-first, second} {
		checkError(t, r, http.StatusConflict)
	}
	for _, got := range streamBatch(t, tsB, "x", imgs[3:5]) {
		if got.Stream.Batch != 1 || !slices.Equal(got.Labels, []string{"cat", "dog", "truck"}) {
			t.Fatalf("b after the conflict: batch %d, labels %v", got.Stream.Batch, got.Labels)
		}
	}
	if sv, _ := readSaved(t, dir, "x"); !slices.Equal(sv.Labels, []string{"cat", "dog", "truck"}) || sv.Stats.Images != 3 {
		t.Errorf("saved stream: labels %v, %d images; want a's labels and 3", sv.Labels, sv.Stats.Images)
	}
}
