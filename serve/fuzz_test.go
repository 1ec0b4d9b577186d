package serve

import (
	"bytes"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// fuzzTargets are the content types and endpoints FuzzRequestBody sends a
// body to, chosen by its first argument.
var fuzzTargets = []struct{ path, ctype string }{
	{"/v1/classify", "image/jpeg"},
	{"/v1/classify", "multipart/form-data; boundary=B"},
	{"/v1/embed", "multipart/form-data; boundary=B"},
	{"/v1/embed", "application/json"},
	{"/v1/classify?labels=cat,dog,bird&stream=f", "application/octet-stream"},
}

// FuzzRequestBody sends raw and multipart bodies: whatever they hold, the
// server answers JSON with a client's status (never 500: a panic or an
// unexpected error), an error message of bounded length, and reads no more
// of the body than the limit (and the 64 KiB it drains after an error).
func FuzzRequestBody(f *testing.F) {
	img := images(f, 1)[0]
	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	mw.SetBoundary("B")
	w, _ := mw.CreateFormFile("image", "x.jpg")
	w.Write(img)
	mw.WriteField("labels", "cat,dog,truck")
	mw.WriteField("template", "a photo of a {}.")
	mw.Close()
	var texts bytes.Buffer
	mw = multipart.NewWriter(&texts)
	mw.SetBoundary("B")
	mw.WriteField("text", "a cat")
	mw.WriteField("text", "a dog")
	mw.Close()
	f.Add(uint8(0), img)
	f.Add(uint8(1), form.Bytes())
	f.Add(uint8(1), form.Bytes()[:len(form.Bytes())/2])
	f.Add(uint8(2), texts.Bytes())
	f.Add(uint8(3), []byte(`{"texts": ["a cat", "a dog"], "normalize": true}`))
	f.Add(uint8(4), img)
	f.Add(uint8(1), []byte("--B\r\nContent-Disposition: form-data; name=\"stream\"\r\n\r\nCAM1\r\n--B--\r\n"))

	const limit = 64 << 10
	cfg := testConfig(f)
	cfg.MaxBodyBytes, cfg.MaxPixels, cfg.MaxWait, cfg.Timeout = limit, 256*256, time.Millisecond, 10*time.Second
	s, err := New(cfg)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { s.Shutdown(f.Context()) })
	h := s.Handler()
	f.Fuzz(func(t *testing.T, target uint8, body []byte) {
		tg := fuzzTargets[int(target)%len(fuzzTargets)]
		cr := &countingReader{head: body, n: int64(len(body))}
		req := httptest.NewRequest(http.MethodPost, tg.path, io.NopCloser(cr))
		req.Header.Set("Content-Type", tg.ctype)
		req.ContentLength = -1
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusOK, http.StatusBadRequest, http.StatusConflict, http.StatusRequestEntityTooLarge,
			http.StatusUnsupportedMediaType, http.StatusServiceUnavailable:
		default:
			t.Fatalf("status %d: %.1000s", rec.Code, rec.Body)
		}
		if !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("status %d, not JSON: %.1000q", rec.Code, rec.Body)
		}
		if rec.Code != http.StatusOK {
			var e struct{ Error string }
			json.Unmarshal(rec.Body.Bytes(), &e)
			if e.Error == "" || len(e.Error) > 4*maxMessage+64 {
				t.Fatalf("status %d, error message of %d bytes: %.200q", rec.Code, len(e.Error), e.Error)
			}
			if strings.Contains(e.Error, "panic") {
				t.Fatalf("status %d: %s", rec.Code, e.Error)
			}
		}
		if cr.read > limit+1+64<<10 {
			t.Fatalf("read %d bytes of the body; the limit is %d", cr.read, limit)
		}
	})
}
