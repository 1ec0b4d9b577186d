package serve

import (
	"bytes"
	"image"
	"image/color"
	"image/png"
	"io"
	"math/rand/v2"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// countingReader yields n bytes (a multipart image part's header, then
// zeros) and counts what was read of it.
type countingReader struct {
	head []byte
	n    int64
	read int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	if c.read >= c.n {
		return 0, io.EOF
	}
	k := int(min(int64(len(p)), c.n-c.read))
	for i := range p[:k] {
		p[i] = 0
		if off := c.read + int64(i); off < int64(len(c.head)) {
			p[i] = c.head[off]
		}
	}
	c.read += int64(k)
	return k, nil
}

// noisePNG is a PNG of w×h random pixels: it compresses badly, so that its
// file is about 3·w·h bytes.
func noisePNG(t *testing.T, w, h int) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	r := rand.New(rand.NewPCG(1, 2))
	for y := range h {
		for x := range w {
			img.Set(x, y, color.RGBA{uint8(r.Uint32()), uint8(r.Uint32()), uint8(r.Uint32()), 255})
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// The body limit holds for every way a body arrives: a raw image, a
// multipart image part, a multipart field, a body of unknown length; and
// a body whose declared length is beyond it is refused before any of it is
// read.
func TestBodyLimitEveryWay(t *testing.T) {
	const limit = 64 << 10
	cfg := testConfig(t)
	cfg.MaxBodyBytes = limit
	s, _ := startServer(t, cfg)
	h := s.Handler()
	big := noisePNG(t, 160, 160) // about 77 KB, 25,600 pixels
	if len(big) <= limit {
		t.Fatalf("test image of %d bytes is within the limit", len(big))
	}
	multipartOf := func(field string, data []byte) (string, []byte) {
		var b bytes.Buffer
		mw := multipart.NewWriter(&b)
		if field == "image" {
			w, _ := mw.CreateFormFile("image", "big.png")
			w.Write(data)
		} else {
			mw.WriteField(field, string(data))
		}
		mw.Close()
		return mw.FormDataContentType(), b.Bytes()
	}
	imgType, imgBody := multipartOf("image", big)
	fieldType, fieldBody := multipartOf("labels", []byte("cat,dog,"+strings.Repeat("x", limit)))
	partHead := "--B\r\nContent-Disposition: form-data; name=\"image\"; filename=\"x.png\"\r\nContent-Type: image/png\r\n\r\n"
	for _, tc := range []struct {
		name, ctype string
		body        []byte
		length      int64 // the declared Content-Length; -1: unknown
		size        int64 // the body's size when body is nil
		maxRead     int64 // the most of the body the server may read
	}{
		{name: "raw image", ctype: "image/png", body: big, length: -1, maxRead: 2 * limit},
		{name: "multipart image part", ctype: imgType, body: imgBody, length: -1, maxRead: 2 * limit},
		{name: "multipart field", ctype: fieldType, body: fieldBody, length: -1, maxRead: 2 * limit},
		{name: "multipart of unknown length", ctype: "multipart/form-data; boundary=B", length: -1, size: 64 << 20, maxRead: 2 * limit},
		{name: "raw, declared too long", ctype: "image/png", length: 1 << 30, size: 1 << 30, maxRead: 0},
		{name: "multipart, declared too long", ctype: "multipart/form-data; boundary=B", length: 1 << 30, size: 1 << 30, maxRead: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := &countingReader{head: tc.body, n: int64(len(tc.body))}
			if tc.body == nil {
				body = &countingReader{head: []byte(partHead), n: tc.size}
			}
			req := httptest.NewRequest(http.MethodPost, "/v1/classify", io.NopCloser(body))
			req.Header.Set("Content-Type", tc.ctype)
			req.ContentLength = tc.length
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			checkError(t, reply{rec.Code, rec.Header(), rec.Body.Bytes()}, http.StatusRequestEntityTooLarge)
			if body.read > tc.maxRead {
				t.Errorf("the server read %d bytes of the body; want at most %d", body.read, tc.maxRead)
			}
		})
	}
}

// A client's long string (a stream id, a text, a field's name or value, a
// header) comes back in an error cut short, with its full length.
func TestLongInputsAreCut(t *testing.T) {
	_, ts := startServer(t, testConfig(t))
	img := images(t, 1)[0]
	id := strings.Repeat("c", 10000)
	text := strings.Repeat("t", 40000)
	form := func(field, value string) (string, []byte) {
		var b bytes.Buffer
		mw := multipart.NewWriter(&b)
		w, _ := mw.CreateFormFile("image", "x.jpg")
		w.Write(img)
		mw.WriteField(field, value)
		mw.Close()
		return mw.FormDataContentType(), b.Bytes()
	}
	normType, normBody := form("normalize", text)
	fieldType, fieldBody := form(text, "x")
	streamType, streamBody := form("stream", id)
	for _, tc := range []struct {
		name, method, path, ctype string
		body                      []byte
		status                    int
		length                    int
	}{
		{"stream id in the query", "POST", "/v1/classify?stream=" + id, "image/jpeg", img, 400, len(id)},
		{"stream id in a form", "POST", "/v1/classify", streamType, streamBody, 400, len(id)},
		{"stream id in the path", "GET", "/v1/streams/" + id, "", nil, 400, len(id)},
		{"stream id to delete", "DELETE", "/v1/streams/" + id, "", nil, 400, len(id)},
		{"unknown path", "GET", "/" + id, "", nil, 404, len(id) + 1},
		{"unknown parameter", "POST", "/v1/classify?" + text + "=1", "image/jpeg", img, 400, len(text)},
		{"normalize", "POST", "/v1/embed", normType, normBody, 400, len(text)},
		{"unknown form field", "POST", "/v1/classify", fieldType, fieldBody, 400, len(text)},
		{"content type", "POST", "/v1/classify", "text/" + text, img, 415, len(text) + 5},
		{"JSON field", "POST", "/v1/embed", "application/json", []byte(`{"` + text + `": 1}`), 400, len(`json: unknown field "` + text + `"`)}, // the decoder's message
		{"label not UTF-8", "POST", "/v1/classify?labels=a,%FF" + text, "image/jpeg", img, 400, len(text) + 1},
		{"text too long", "POST", "/v1/embed", "application/json", []byte(`{"texts": ["` + text + `"]}`), 400, len(text)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := do(t, tc.method, ts.URL+tc.path, tc.ctype, tc.body)
			checkError(t, r, tc.status)
			if len(r.body) > 600 || !strings.Contains(string(r.body), strconv.Itoa(tc.length)) {
				t.Errorf("%d bytes, want at most 600 that give the length %d: %.700s", len(r.body), tc.length, r.body)
			}
		})
	}
}

// A stream with fewer labels than its method needs is refused with a
// message that says how many it needs, and nothing of the method's inner
// workings.
func TestTooFewLabelsMessage(t *testing.T) {
	cfg := testConfig(t)
	cfg.BatchSize = 1
	_, ts := startServer(t, cfg)
	_, r := classify(t, ts, "?stream=two&labels=cat,dog", images(t, 1)[0])
	checkError(t, r, http.StatusBadRequest)
	if msg := string(r.body); !strings.Contains(msg, "subtta-m needs at least 3 labels") || !strings.Contains(msg, "2 given") || strings.Contains(msg, "R=") || strings.Contains(msg, "tta:") {
		t.Errorf("message %s; want one that says subtta-m needs at least 3 labels, 2 given, and no internals", msg)
	}
}

// A Config limit out of range is refused with an error naming the field.
func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"negative batch size", func(c *Config) { c.BatchSize = -1 }, "Config.BatchSize -1"},
		{"negative max streams", func(c *Config) { c.MaxStreams = -1 }, "Config.MaxStreams -1"},
		{"negative body limit", func(c *Config) { c.MaxBodyBytes = -5 }, "Config.MaxBodyBytes -5"},
		{"one label allowed", func(c *Config) { c.MaxLabels = 1 }, "Config.MaxLabels 1"},
		{"negative timeout", func(c *Config) { c.Timeout = -time.Second }, "Config.Timeout -1s"},
		{"concurrency below the batch", func(c *Config) { c.MaxConcurrent = 3 }, "Config.MaxConcurrent 3 is less than the batch size 4"},
		{"a multi-view method", func(c *Config) { c.Method = "vte" }, "vte sees 64 views of each image"},
		// Default labels too few for the method would refuse every stream
		// request without labels of its own.
		{"too few labels for the method", func(c *Config) { c.Labels = []string{"cat", "dog"} }, "Config.Labels: 2 labels, and subtta-m needs at least 3 (its text subspace"},
		{"an empty label", func(c *Config) { c.Labels = []string{"cat", "", "dog"} }, "Config.Labels: label 2 is empty"},
		{"a blank label", func(c *Config) { c.Labels = []string{"cat", "dog", " "} }, "Config.Labels: label 3 is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t)
			tc.edit(&cfg)
			if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New: %v; want an error with %q", err, tc.want)
			}
		})
	}
	// Two labels are enough for a method that needs two.
	cfg := testConfig(t)
	cfg.Labels, cfg.Method = []string{"cat", "dog"}, "tent"
	if s, err := New(cfg); err != nil {
		t.Errorf("New with 2 labels and tent: %v", err)
	} else {
		s.Shutdown(t.Context())
	}
}

// Stream ids are folded to lower case: CAM1 and cam1 are one stream, with
// one file, on every file system.
func TestStreamIDsFoldCase(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t)
	cfg.BatchSize, cfg.StateDir = 1, dir
	_, ts := startServer(t, cfg)
	imgs := images(t, 2)
	for i, id := range []string{"CAM1", "cam1"} {
		got, r := classify(t, ts, "?stream="+id, imgs[i])
		if r.status != http.StatusOK || got.Stream.ID != "cam1" || got.Stream.Batch != int64(i) {
			t.Fatalf("stream %s: status %d, %s", id, r.status, r.body)
		}
	}
	if st, code := streamStatus(t, ts, "Cam1"); code != http.StatusOK || st.ID != "cam1" || st.Images != 2 {
		t.Errorf("GET Cam1: status %d, %+v", code, st)
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "*.stream")); !slices.Equal(files, []string{filepath.Join(dir, "cam1.stream")}) {
		t.Errorf("state files %v, want cam1.stream alone", files)
	}
	if r := do(t, http.MethodDelete, ts.URL+"/v1/streams/CAM1", "", nil); r.status != http.StatusOK {
		t.Errorf("DELETE CAM1: %d %s", r.status, r.body)
	}

	// A state directory that holds a file of an id with capitals, saved
	// before ids were folded, is refused, naming the file.
	old := t.TempDir()
	if err := os.WriteFile(filepath.Join(old, "CAM2.stream"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.StateDir = old
	if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "CAM2.stream") || !strings.Contains(err.Error(), "cam2.stream") {
		t.Errorf("New on a folder with CAM2.stream: %v", err)
	}
}
