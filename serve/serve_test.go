package serve

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"github.com/subtta/subtta/serve/loadtest"
	"hash/crc32"
	"image"
	"image/png"
	"math"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/subtta/subtta/builtin"
	"github.com/subtta/subtta/clip"
	"github.com/subtta/subtta/data"
	"github.com/subtta/subtta/tta"
)

// referenceLogits runs the preset method as subtta eval builds it (Lookup,
// Heads, New, Step on the CLIP-preprocessed images) on a model of its own,
// batch by batch, and returns every image's logits.
func referenceLogits(t *testing.T, method string, batches [][][]byte) [][]float64 {
	t.Helper()
	m := builtinModel(t)
	p, err := tta.Lookup("cifar10-c", method)
	if err != nil {
		t.Fatal(err)
	}
	p.BatchSize = 4
	heads, err := p.Heads(m, builtin.Tokenizer(), data.CIFAR10Classes)
	if err != nil {
		t.Fatal(err)
	}
	meth, err := p.New(m, heads)
	if err != nil {
		t.Fatal(err)
	}
	pre := data.NewCLIPPreprocessor(m.Config.Vision.ImageSize)
	var out [][]float64
	for _, batch := range batches {
		var px []float32
		for _, b := range batch {
			img, err := data.DecodeRGB("test", b)
			if err != nil {
				t.Fatal(err)
			}
			p, err := pre.Transform(nil, img)
			if err != nil {
				t.Fatal(err)
			}
			px = append(px, p...)
		}
		res, err := meth.Step(px, len(batch))
		if err != nil {
			t.Fatal(err)
		}
		for i := range batch {
			out = append(out, slices.Clone(res.Logits.RawRowView(i)))
		}
	}
	return out
}

func batchesOf(imgs [][]byte, size int) [][][]byte {
	var out [][][]byte
	for len(imgs) > 0 {
		n := min(size, len(imgs))
		out = append(out, imgs[:n])
		imgs = imgs[n:]
	}
	return out
}

func TestFrozenClassifyIsTheSourceMethod(t *testing.T) {
	_, ts := startServer(t, testConfig(t))
	imgs := images(t, 4)
	want := referenceLogits(t, "source", [][][]byte{imgs[:1]})
	got, r := classify(t, ts, "", imgs[0])
	if r.status != http.StatusOK {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	if !slices.Equal(got.Labels, data.CIFAR10Classes) || got.Model != "builtin-test" || got.Stream != nil {
		t.Fatalf("answer %+v", got)
	}
	if !slices.Equal(got.Logits, want[0]) {
		t.Errorf("logits %v, the source method's %v", got.Logits, want[0])
	}
	var sum float64
	for _, p := range got.Probs {
		sum += p
	}
	if math.Abs(sum-1) > 1e-12 || !slices.Equal(got.Probs, clip.SoftmaxRow(want[0])) {
		t.Errorf("probabilities %v (sum %v)", got.Probs, sum)
	}

	// Labels and templates of the request, as a multipart form.
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	fw, _ := mw.CreateFormFile("image", "cat.jpg")
	fw.Write(imgs[1])
	mw.WriteField("labels", "cat, dog ,truck")
	mw.WriteField("template", "a photo of a {}.")
	mw.WriteField("template", "a blurry photo of a {}.")
	mw.Close()
	r = do(t, http.MethodPost, ts.URL+"/v1/classify", mw.FormDataContentType(), body.Bytes())
	var mp ClassifyResponse
	r.decode(t, &mp)
	if r.status != http.StatusOK || !slices.Equal(mp.Labels, []string{"cat", "dog", "truck"}) || len(mp.Probs) != 3 {
		t.Fatalf("multipart: status %d, %+v", r.status, mp)
	}
}

func TestStreamEqualsEval(t *testing.T) {
	s, ts := startServer(t, testConfig(t))
	batches := batchesOf(images(t, 12), 4)
	want := referenceLogits(t, "subtta-m", batches)
	var got []ClassifyResponse
	for _, b := range batches {
		got = append(got, streamBatch(t, ts, "cam1", b)...)
	}
	for i, g := range got {
		if g.Stream == nil || g.Stream.Batch != int64(i/4) || g.Stream.Position != i%4 || g.Stream.BatchSize != 4 || g.Stream.Steps != 2 {
			t.Fatalf("image %d: stream answer %+v", i, g.Stream)
		}
		if !slices.Equal(g.Logits, want[i]) || !slices.Equal(g.Probs, clip.SoftmaxRow(want[i])) {
			t.Fatalf("image %d (batch %d): logits %v, eval's %v", i, i/4, g.Logits, want[i])
		}
	}
	// The adapted stream differs from the frozen model, which is still
	// the source model.
	frozen, _ := classify(t, ts, "", images(t, 12)[11])
	if slices.Equal(frozen.Logits, got[11].Logits) {
		t.Error("the stream's last prediction equals the frozen model's: nothing adapted")
	}
	if src := referenceLogits(t, "source", [][][]byte{images(t, 12)[11:]}); !slices.Equal(frozen.Logits, src[0]) {
		t.Errorf("frozen logits after adaptation %v, the source method's %v", frozen.Logits, src[0])
	}
	st, code := streamStatus(t, ts, "cam1")
	if code != http.StatusOK || st.Images != 12 || st.Batches != 3 || st.Steps != 6 || st.Pending != 0 || !st.InMemory ||
		st.LastLoss["align"] == 0 || st.PrincipalAngles == nil || st.PrincipalAngles.Rank < 1 {
		t.Errorf("status %d %+v, principal angles %+v", code, st, st.PrincipalAngles)
	}
	if pa := st.PrincipalAngles; pa != nil && (pa.Min > pa.Mean || pa.Mean > pa.Max || pa.Max > 1+1e-9) {
		t.Errorf("principal angles %+v", pa)
	}
	// Frozen requests between steps left the source weights alone.
	if !slices.Equal(s.params.read(nil), s.source) {
		t.Error("the model does not hold the source LayerNorm values at rest")
	}
}

// A server killed after nine batches and started again from the state
// directory continues the stream exactly as one that was never stopped,
// and so does one killed again after the next two.
func TestRestartContinuesStream(t *testing.T) {
	const size = 2
	batches := batchesOf(images(t, 12*size), size)
	config := func(dir string) Config {
		cfg := testConfig(t)
		cfg.BatchSize, cfg.StateDir = size, dir
		return cfg
	}

	whole, uninterrupted := startServer(t, config(t.TempDir()))
	var want []ClassifyResponse
	var wantState [][]byte // the method's state after each batch
	for _, b := range batches {
		want = append(want, streamBatch(t, uninterrupted, "cam", b)...)
		_, state, _ := whole.streamState(t, "cam")
		wantState = append(wantState, state)
	}

	dir := t.TempDir()
	next := 0
	for run, kill := range []int{9, 11, len(batches)} {
		s, ts := startServer(t, config(dir))
		if run > 0 {
			st, code := streamStatus(t, ts, "cam")
			if code != http.StatusOK || st.InMemory || st.Images != int64(next*size) || st.Batches != int64(next) {
				t.Fatalf("run %d: saved stream: status %d %+v", run, code, st)
			}
			if _, err := s.stream(context.Background(), "cam", "", nil, nil); err != nil {
				t.Fatal(err)
			}
			if _, state, stats := s.streamState(t, "cam"); !bytes.Equal(state, wantState[next-1]) || !stats.Restored {
				t.Fatalf("run %d: the restored method state differs from the saved one (restored %v)", run, stats.Restored)
			}
		}
		for ; next < kill; next++ {
			got := streamBatch(t, ts, "cam", batches[next])
			for i, g := range got {
				if w := want[next*size+i]; !slices.Equal(g.Logits, w.Logits) || g.Stream.Batch != int64(next) {
					t.Fatalf("run %d, batch %d, image %d: batch index %d, logits %v; uninterrupted: %v",
						run, next, i, g.Stream.Batch, g.Logits, w.Logits)
				}
			}
		}
		// No Shutdown: the state was saved after every step.
		ts.Close()
	}
	if p, _, _ := whole.streamState(t, "cam"); slices.Equal(p, whole.source) {
		t.Fatal("the stream did not adapt")
	}
}

// Frozen requests run while a stream steps, and still get the source
// model's answer.
func TestFrozenDuringSteps(t *testing.T) {
	_, ts := startServer(t, testConfig(t))
	imgs := images(t, 8)
	want := referenceLogits(t, "source", [][][]byte{imgs[:1]})[0]
	stop := make(chan struct{})
	type result struct {
		n   int
		err string
	}
	res := make(chan result, 1)
	go func() {
		n := 0
		for {
			select {
			case <-stop:
				res <- result{n, ""}
				return
			default:
			}
			resp, err := http.Post(ts.URL+"/v1/classify", "image/jpeg", bytes.NewReader(imgs[0]))
			if err != nil {
				res <- result{n, err.Error()}
				return
			}
			var got ClassifyResponse
			err = json.NewDecoder(resp.Body).Decode(&got)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK || !slices.Equal(got.Logits, want) {
				res <- result{n, fmt.Sprintf("status %d, logits %v, want %v (%v)", resp.StatusCode, got.Logits, want, err)}
				return
			}
			n++
		}
	}()
	for _, b := range batchesOf(imgs, 4) {
		streamBatch(t, ts, "busy", b)
	}
	close(stop)
	r := <-res
	if r.err != "" || r.n == 0 {
		t.Errorf("after %d frozen requests during the steps: %s", r.n, r.err)
	}
}

// The status of a stream can be read while it steps and saves (run with
// -race).
func TestStatusDuringSteps(t *testing.T) {
	cfg := testConfig(t)
	cfg.StateDir = t.TempDir()
	_, ts := startServer(t, cfg)
	stop := make(chan struct{})
	polled := make(chan int)
	go func() {
		n := 0
		for {
			select {
			case <-stop:
				polled <- n
				return
			default:
			}
			if resp, err := http.Get(ts.URL + "/v1/streams/cam"); err == nil {
				resp.Body.Close()
				n++
			}
		}
	}()
	for _, b := range batchesOf(images(t, 12), 4) {
		streamBatch(t, ts, "cam", b)
	}
	close(stop)
	if n := <-polled; n == 0 {
		t.Error("no status read during the steps")
	}
	if st, _ := streamStatus(t, ts, "cam"); st.Batches != 3 {
		t.Errorf("after 3 batches: %+v", st)
	}
}

func TestEvictionAndDelete(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t)
	cfg.StateDir, cfg.MaxStreams, cfg.BatchSize = dir, 2, 1
	s, ts := startServer(t, cfg)
	imgs := images(t, 6)
	for i, id := range []string{"a", "b", "a", "c"} { // c evicts b, the least recently used
		if _, r := classify(t, ts, "?stream="+id, imgs[i]); r.status != http.StatusOK {
			t.Fatalf("%s: %d %s", id, r.status, r.body)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.mu.Lock()
		_, inB := s.streams["b"]
		n := len(s.streams)
		s.mu.Unlock()
		if !inB && n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("b still in memory (%d streams)", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	st, code := streamStatus(t, ts, "b")
	if code != http.StatusOK || st.InMemory || st.Images != 1 {
		t.Fatalf("evicted stream: %d %+v", code, st)
	}
	got, r := classify(t, ts, "?stream=b", imgs[4]) // read back, evicting a
	if r.status != http.StatusOK || got.Stream.Batch != 1 {
		t.Fatalf("b after eviction: %d %s", r.status, r.body)
	}
	if st, _ := streamStatus(t, ts, "b"); !st.Restored || st.Images != 2 {
		t.Errorf("b restored %v with %d images", st.Restored, st.Images)
	}

	// DELETE forgets the stream, in memory and on disk.
	if r := do(t, http.MethodDelete, ts.URL+"/v1/streams/b", "", nil); r.status != http.StatusOK {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	if _, code := streamStatus(t, ts, "b"); code != http.StatusNotFound {
		t.Errorf("GET after DELETE: %d", code)
	}
	// The empty lock file of its saves stays (internal/filelock), and its
	// state is a tombstone: the stream was deleted, not lost.
	if files, _ := filepath.Glob(filepath.Join(dir, "*b.*")); !slices.Equal(files, []string{filepath.Join(dir, ".b.stream.lock"), filepath.Join(dir, "b.stream")}) {
		t.Errorf("files left after DELETE: %v; want the lock file and the tombstone", files)
	}
	if sv, ok := readSaved(t, dir, "b"); !ok || !sv.Deleted {
		t.Errorf("b.stream after DELETE: %+v; want a tombstone", sv)
	}
	if got, _ := classify(t, ts, "?stream=b", imgs[5]); got.Stream == nil || got.Stream.Batch != 0 {
		t.Errorf("b after DELETE does not start afresh: %+v", got.Stream)
	}
	// Deleting an evicted stream removes its files.
	if r := do(t, http.MethodDelete, ts.URL+"/v1/streams/a", "", nil); r.status != http.StatusOK {
		t.Fatalf("delete evicted: %d %s", r.status, r.body)
	}
	if r := do(t, http.MethodDelete, ts.URL+"/v1/streams/a", "", nil); r.status != http.StatusNotFound {
		t.Errorf("second delete: %d %s", r.status, r.body)
	}
}

// Without a state directory a full server refuses new streams rather than
// lose one's adaptation.
func TestFullWithoutStateDir(t *testing.T) {
	cfg := testConfig(t)
	cfg.MaxStreams, cfg.BatchSize = 1, 1
	_, ts := startServer(t, cfg)
	img := images(t, 1)[0]
	if _, r := classify(t, ts, "?stream=a", img); r.status != http.StatusOK {
		t.Fatal(r.status)
	}
	_, r := classify(t, ts, "?stream=b", img)
	checkError(t, r, http.StatusServiceUnavailable)
	if r.header.Get("Retry-After") == "" {
		t.Error("no Retry-After")
	}
}

// pngHeader is the start of a PNG that claims w×h pixels.
func pngHeader(w, h uint32) []byte {
	var b bytes.Buffer
	b.WriteString("\x89PNG\r\n\x1a\n")
	chunk := []byte("IHDR")
	chunk = binary.BigEndian.AppendUint32(chunk, w)
	chunk = binary.BigEndian.AppendUint32(chunk, h)
	chunk = append(chunk, 8, 2, 0, 0, 0) // 8-bit RGB
	binary.Write(&b, binary.BigEndian, uint32(13))
	b.Write(chunk)
	binary.Write(&b, binary.BigEndian, crc32.ChecksumIEEE(chunk))
	return b.Bytes()
}

func checkError(t *testing.T, r reply, status int) {
	t.Helper()
	var e struct {
		Error string `json:"error"`
	}
	if r.status != status {
		t.Errorf("status %d, want %d: %s", r.status, status, r.body)
		return
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	r.decode(t, &e)
	if e.Error == "" {
		t.Errorf("no error message: %s", r.body)
	}
}

func TestBadRequests(t *testing.T) {
	cfg := testConfig(t)
	cfg.MaxLabels, cfg.MaxBodyBytes, cfg.MaxPixels = 5, 64<<10, 1<<20
	_, ts := startServer(t, cfg)
	img := images(t, 1)[0]
	var big bytes.Buffer
	png.Encode(&big, image.NewGray(image.Rect(0, 0, 1100, 1000))) // 1.1 megapixels, a small file
	var noImage bytes.Buffer
	mw := multipart.NewWriter(&noImage)
	mw.WriteField("labels", "a,b")
	mw.Close()
	var unknownField bytes.Buffer
	mw2 := multipart.NewWriter(&unknownField)
	mw2.WriteField("label", "a,b")
	mw2.Close()
	// A form field of the other endpoint, with an image.
	otherField := func(name string) (string, []byte) {
		var b bytes.Buffer
		mw := multipart.NewWriter(&b)
		w, _ := mw.CreateFormFile("image", "x.jpg")
		w.Write(img)
		mw.WriteField(name, "true")
		mw.Close()
		return mw.FormDataContentType(), b.Bytes()
	}
	normalizeType, normalizeForm := otherField("normalize")
	textType, textForm := otherField("text")
	streamType, streamForm := otherField("stream")
	for _, tc := range []struct {
		name, method, path, ctype string
		body                      []byte
		status                    int
	}{
		{"not an image", "POST", "/v1/classify", "image/jpeg", []byte("hello, this is text"), 400},
		{"truncated JPEG", "POST", "/v1/classify", "image/jpeg", img[:len(img)/2], 400},
		{"header only", "POST", "/v1/classify", "image/png", pngHeader(64, 64), 400},
		{"huge dimensions", "POST", "/v1/classify", "image/png", pngHeader(50000, 50000), 413},
		{"too many pixels", "POST", "/v1/classify", "image/png", big.Bytes(), 413},
		{"empty body", "POST", "/v1/classify", "image/jpeg", nil, 400},
		{"body too large", "POST", "/v1/classify", "image/jpeg", make([]byte, 65<<10), 413},
		{"wrong content type", "POST", "/v1/classify", "text/plain", img, 415},
		{"no content type", "POST", "/v1/classify", "", img, 415},
		{"JSON to classify", "POST", "/v1/classify", "application/json", []byte(`{}`), 415},
		{"too many labels", "POST", "/v1/classify?labels=a,b,c,d,e,f", "image/jpeg", img, 400},
		{"one label", "POST", "/v1/classify?labels=cat", "image/jpeg", img, 400},
		{"duplicate label", "POST", "/v1/classify?labels=cat,dog,cat", "image/jpeg", img, 400},
		{"template without {}", "POST", "/v1/classify?template=a+photo", "image/jpeg", img, 400},
		{"bad stream id", "POST", "/v1/classify?stream=../x", "image/jpeg", img, 400},
		{"unknown parameter", "POST", "/v1/classify?steam=x", "image/jpeg", img, 400},
		{"stream twice", "POST", "/v1/classify?stream=a&stream=b", "image/jpeg", img, 400},
		{"multipart without image", "POST", "/v1/classify", mw.FormDataContentType(), noImage.Bytes(), 400},
		{"unknown form field", "POST", "/v1/classify", mw2.FormDataContentType(), unknownField.Bytes(), 400},
		{"bad multipart", "POST", "/v1/classify", "multipart/form-data; boundary=x", []byte("garbage"), 400},
		{"unknown stream", "GET", "/v1/streams/nobody", "", nil, 404},
		{"delete unknown stream", "DELETE", "/v1/streams/nobody", "", nil, 404},
		{"bad stream id in path", "GET", "/v1/streams/.hidden", "", nil, 400},
		{"GET classify", "GET", "/v1/classify", "", nil, 405},
		{"unknown path", "GET", "/v2/classify", "", nil, 404},
		{"embed nothing", "POST", "/v1/embed", "application/json", []byte(`{"texts": []}`), 400},
		{"embed bad JSON", "POST", "/v1/embed", "application/json", []byte(`{"texts": "a"}`), 400},
		{"embed with labels", "POST", "/v1/embed?labels=a,b", "image/jpeg", img, 400},
		// A parameter of the other endpoint would do nothing.
		{"classify with normalize", "POST", "/v1/classify?normalize=true", "image/jpeg", img, 400},
		{"classify with a normalize field", "POST", "/v1/classify", normalizeType, normalizeForm, 400},
		{"classify with a text field", "POST", "/v1/classify", textType, textForm, 400},
		{"embed with a stream field", "POST", "/v1/embed", streamType, streamForm, 400},
		{"embed with a stream", "POST", "/v1/embed?stream=cam", "image/jpeg", img, 400},
		// JSON: one object, no null for a string or a bool.
		{"embed two objects", "POST", "/v1/embed", "application/json", []byte(`{"texts":["a"]}{"texts":["b"]}`), 400},
		{"embed data after the object", "POST", "/v1/embed", "application/json", []byte(`{"texts":["a"]} x`), 400},
		{"embed a null text", "POST", "/v1/embed", "application/json", []byte(`{"texts":[null]}`), 400},
		{"embed normalize null", "POST", "/v1/embed", "application/json", []byte(`{"texts":["a"],"normalize":null}`), 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkError(t, do(t, tc.method, ts.URL+tc.path, tc.ctype, tc.body), tc.status)
			// The server goes on serving.
			if _, r := classify(t, ts, "", img); r.status != http.StatusOK {
				t.Fatalf("after %s: %d %s", tc.name, r.status, r.body)
			}
		})
	}
	// The messages name what is wrong.
	for _, tc := range []struct{ path, ctype, body, want string }{
		{"/v1/classify?normalize=true", "image/jpeg", string(img), "parameter normalize is for /v1/embed, not /v1/classify"},
		{"/v1/classify", normalizeType, string(normalizeForm), "form field normalize is for /v1/embed"},
		{"/v1/classify", textType, string(textForm), "form field text is for /v1/embed"},
		{"/v1/embed?template=x", "image/jpeg", string(img), "parameter template is for /v1/classify"},
		{"/v1/embed?norm=1", "image/jpeg", string(img), `unknown parameter "norm" (want normalize)`},
		{"/v1/embed", "application/json", `{"texts":["a"]}{"texts":["b"]}`, "data after the object, which ends at byte 15"},
		{"/v1/embed", "application/json", `{"texts":["a",null]}`, "texts[1] is null"},
	} {
		r := do(t, http.MethodPost, ts.URL+tc.path, tc.ctype, []byte(tc.body))
		var e struct{ Error string }
		json.Unmarshal(r.body, &e)
		if r.status != http.StatusBadRequest || !strings.Contains(e.Error, tc.want) {
			t.Errorf("%s %.60q: %d %s; want 400 saying %q", tc.path, tc.body, r.status, r.body, tc.want)
		}
	}
	// Whitespace after the object is not data.
	if r := do(t, http.MethodPost, ts.URL+"/v1/embed", "application/json", []byte("{\"texts\":[\"a\"]} \n")); r.status != http.StatusOK {
		t.Errorf("an object and a newline: %d %s", r.status, r.body)
	}
	r := do(t, http.MethodPut, ts.URL+"/v1/streams/x", "", nil)
	if checkError(t, r, http.StatusMethodNotAllowed); r.header.Get("Allow") != "DELETE, GET" {
		t.Errorf("Allow %q", r.header.Get("Allow"))
	}
}

func TestStreamLabelsConflict(t *testing.T) {
	cfg := testConfig(t)
	cfg.BatchSize = 1
	_, ts := startServer(t, cfg)
	img := images(t, 1)[0]
	got, r := classify(t, ts, "?stream=s&labels=cat,dog,truck", img)
	if r.status != http.StatusOK || !slices.Equal(got.Labels, []string{"cat", "dog", "truck"}) {
		t.Fatalf("%d %s", r.status, r.body)
	}
	if got, r := classify(t, ts, "?stream=s", img); r.status != http.StatusOK || len(got.Probs) != 3 {
		t.Fatalf("without labels: %d %s", r.status, r.body)
	}
	_, r = classify(t, ts, "?stream=s&labels=cat,dog,bird", img)
	checkError(t, r, http.StatusConflict)
	// SubTTA's text subspace needs three classes.
	_, r = classify(t, ts, "?stream=two&labels=cat,dog", img)
	checkError(t, r, http.StatusBadRequest)
}

// A client that goes away, waiting for its batch or half-way through its
// body, is dropped; its image does not enter the stream.
func TestClientDisconnects(t *testing.T) {
	s, ts := startServer(t, testConfig(t))
	imgs := images(t, 4)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/v1/classify?stream=cam", bytes.NewReader(imgs[0]))
	req.Header.Set("Content-Type", "image/jpeg")
	done := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	waitPending(t, ts, "cam", 1)
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the cancelled request was answered")
	}
	waitPending(t, ts, "cam", 0)

	// Half a body, then the connection closes.
	conn, err := net.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	conn.Write([]byte("POST /v1/classify HTTP/1.1\r\nHost: x\r\nContent-Type: image/jpeg\r\nContent-Length: 100000\r\n\r\n"))
	conn.Write(imgs[1][:100])
	conn.Close()

	got := streamBatch(t, ts, "cam", imgs)
	if got[0].Stream.Batch != 0 || got[0].Stream.BatchSize != 4 {
		t.Errorf("first batch %+v", got[0].Stream)
	}
	if st, _ := streamStatus(t, ts, "cam"); st.Images != 4 {
		t.Errorf("%d images adapted on, want 4", st.Images)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		m := do(t, http.MethodGet, ts.URL+"/metrics", "", nil)
		text := string(m.body)
		if strings.Contains(text, `subtta_requests_total{code="499",endpoint="classify"} 1`) &&
			strings.Contains(text, `subtta_requests_total{code="400",endpoint="classify"} 1`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("metrics do not count the disconnects:\n%s", grep(text, "subtta_requests_total"))
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = s
}

func grep(text, prefix string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestConcurrencyLimitAndTimeout(t *testing.T) {
	cfg := testConfig(t)
	cfg.MaxConcurrent, cfg.Timeout = cfg.BatchSize, 2*time.Second
	_, ts := startServer(t, cfg)
	img := images(t, 1)[0]
	// Three requests wait for a batch of 4 on one stream, one on another.
	done := make(chan reply, cfg.MaxConcurrent)
	for i := range cfg.MaxConcurrent {
		id := "slow"
		if i == cfg.MaxConcurrent-1 {
			id = "slow2"
		}
		go func() { _, r := classify(t, ts, "?stream="+id, img); done <- r }()
		if id == "slow" {
			waitPending(t, ts, id, i+1)
		} else {
			waitPending(t, ts, id, 1)
		}
	}
	_, r := classify(t, ts, "", img)
	checkError(t, r, http.StatusTooManyRequests)
	if r.header.Get("Retry-After") == "" {
		t.Error("429 without Retry-After")
	}
	for range cfg.MaxConcurrent {
		checkError(t, <-done, http.StatusGatewayTimeout) // the batches of 4 never filled
	}
	if _, r := classify(t, ts, "", img); r.status != http.StatusOK {
		t.Errorf("after the timeout: %d %s", r.status, r.body)
	}
}

// A request whose batch is being stepped when its time runs out still gets
// the step's answer: the stream has adapted on its image.
func TestTimeoutDuringStepIsAnswered(t *testing.T) {
	cfg := testConfig(t)
	cfg.BatchSize, cfg.Timeout = 1, 300*time.Millisecond
	s, ts := startServer(t, cfg)
	s.beforeStep = func() { time.Sleep(time.Second) }
	got, r := classify(t, ts, "?stream=slow", images(t, 1)[0])
	if r.status != http.StatusOK || got.Stream == nil {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	if st, _ := streamStatus(t, ts, "slow"); st.Images != 1 {
		t.Errorf("%d images adapted on for 1 answer", st.Images)
	}
}

func TestPanicIsA500(t *testing.T) {
	s, _ := startServer(t, testConfig(t))
	h := s.wrap("boom", false, map[string]handlerFunc{http.MethodGet: func(http.ResponseWriter, *http.Request) error { panic("boom") }})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/boom", nil))
	if rec.Code != http.StatusInternalServerError || !strings.Contains(rec.Body.String(), `"error"`) {
		t.Errorf("%d %s", rec.Code, rec.Body)
	}
}

func TestEmbed(t *testing.T) {
	cfg := testConfig(t)
	s, ts := startServer(t, cfg)
	img := images(t, 1)[0]
	r := do(t, http.MethodPost, ts.URL+"/v1/embed", "image/jpeg", img)
	var e EmbedResponse
	r.decode(t, &e)
	px, err := s.decode(img)
	if err != nil {
		t.Fatal(err)
	}
	f, _ := cfg.Model.EncodeImage(px, 1)
	if r.status != http.StatusOK || len(e.Features) != 1 || !slices.Equal(e.Features[0], f.Value().Data().F64()) {
		t.Fatalf("image features: %d %s", r.status, r.body)
	}
	r = do(t, http.MethodPost, ts.URL+"/v1/embed", "application/json", []byte(`{"texts": ["a photo of a cat.", "a dog"], "normalize": true}`))
	r.decode(t, &e)
	if r.status != http.StatusOK || len(e.Features) != 2 || len(e.Features[1]) != cfg.Model.Config.EmbedDim || !e.Normalized {
		t.Fatalf("text features: %d %s", r.status, r.body)
	}
	var n float64
	for _, v := range e.Features[0] {
		n += v * v
	}
	if math.Abs(n-1) > 1e-12 {
		t.Errorf("normalised norm² %v", n)
	}
}

func TestHealthAndMetrics(t *testing.T) {
	cfg := testConfig(t)
	cfg.BatchSize = 2
	_, ts := startServer(t, cfg)
	streamBatch(t, ts, "m", images(t, 2))
	if r := do(t, http.MethodGet, ts.URL+"/healthz", "", nil); r.status != http.StatusOK || !strings.Contains(string(r.body), `"ok"`) {
		t.Errorf("healthz: %d %s", r.status, r.body)
	}
	r := do(t, http.MethodGet, ts.URL+"/metrics", "", nil)
	text := string(r.body)
	for _, want := range []string{
		`subtta_requests_total{code="200",endpoint="classify"} 2`,
		`subtta_request_duration_seconds_bucket{endpoint="classify"`,
		`subtta_batch_size_count 1`,
		`subtta_batch_size_sum 2`,
		`subtta_adaptation_batches_total 1`,
		`subtta_adaptation_optimizer_steps_total 2`,
		`subtta_streams 1`,
		`subtta_step_duration_seconds_count 1`,
		`process_resident_memory_bytes`,
		`go_goroutines`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// Shutdown steps the batches waiting without waiting for them to fill,
// then refuses stream requests.
func TestShutdownDrains(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t)
	cfg.StateDir = dir
	s, ts := startServer(t, cfg)
	imgs := images(t, 2)
	done := make(chan reply, 2)
	for i, img := range imgs {
		go func() { _, r := classify(t, ts, "?stream=d", img); done <- r }()
		waitPending(t, ts, "d", i+1)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range imgs {
		if r := <-done; r.status != http.StatusOK {
			t.Errorf("waiting request after Shutdown: %d %s", r.status, r.body)
		}
	}
	_, r := classify(t, ts, "?stream=d", imgs[0])
	checkError(t, r, http.StatusServiceUnavailable)
	if _, err := os.Stat(filepath.Join(dir, "d.stream")); err != nil {
		t.Errorf("no saved state: %v", err)
	}
}

func TestLoadTest(t *testing.T) {
	cfg := testConfig(t)
	cfg.BatchSize, cfg.MaxWait = 2, 50*time.Millisecond
	_, ts := startServer(t, cfg)
	for _, frozen := range []bool{true, false} {
		rep, err := loadtest.Config{URL: ts.URL, Sources: 2, Requests: 4, Concurrency: 2, Frozen: frozen, Images: images(t, 8), Duration: time.Minute}.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if rep.Sent != 8 || rep.OK != 8 || rep.Errors != 0 || !rep.ExactlyOnce || rep.P99 <= 0 || rep.PerSec <= 0 || rep.CPUSeconds <= 0 || rep.PeakRSS <= 0 {
			var b strings.Builder
			rep.Write(&b)
			t.Errorf("frozen %v: %+v\n%s", frozen, rep, b.String())
		}
	}
	if _, err := (loadtest.Config{URL: "http://192.0.2.1:8080", Sources: 1, Requests: 1, Concurrency: 1, Images: images(t, 1)}).Run(context.Background()); err == nil {
		t.Error("a load test against another machine was not refused")
	}
}
