package serve

import (
	"bytes"
	"encoding/json"
	"errors"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/subtta/subtta/tta"
)

// A query string that does not parse, or a labels list with an empty
// entry, is refused (400) naming what is wrong, never read in part: a
// stream request whose stream= was dropped would be answered frozen, its
// client believing its stream adapts, and a list with a label dropped is
// not the client's list.
func TestRequestReadWhole(t *testing.T) {
	cfg := testConfig(t)
	cfg.BatchSize = 1
	_, ts := startServer(t, cfg)
	img := images(t, 1)[0]
	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	w, _ := mw.CreateFormFile("image", "x.jpg")
	w.Write(img)
	mw.WriteField("stream", "form1")
	mw.WriteField("labels", "cat,,dog,truck")
	mw.Close()
	for _, tc := range []struct {
		name, path, ctype string
		body              []byte
		want              string
	}{
		{"a semicolon", "/v1/classify?stream=cam1;x=1", "image/jpeg", img, `query string: "stream=cam1;x=1" does not parse (invalid semicolon separator in query)`},
		{"a bad escape in the stream", "/v1/classify?stream=cam%ZZ", "image/jpeg", img, `query string: "stream=cam%ZZ" does not parse (invalid URL escape "%ZZ")`},
		{"a bad escape in the labels", "/v1/classify?labels=%ZZ", "image/jpeg", img, `"labels=%ZZ" does not parse`},
		{"the first bad pair named", "/v1/classify?stream=cam2&labels=a,b%ZZ&template=%zz", "image/jpeg", img, `"labels=a,b%ZZ" does not parse`},
		{"a bad escape in normalize", "/v1/embed?normalize=%ZZ", "image/jpeg", img, `"normalize=%ZZ" does not parse`},
		{"an empty label", "/v1/classify?stream=cam3&labels=cat,,dog,truck", "image/jpeg", img, `labels "cat,,dog,truck": entry 2 is empty`},
		{"a blank label", "/v1/classify?labels=cat,+,dog", "image/jpeg", img, `labels "cat, ,dog": entry 2 is empty`},
		{"a trailing comma", "/v1/classify?labels=cat,dog,truck,", "image/jpeg", img, `labels "cat,dog,truck,": entry 4 is empty`},
		{"an empty label in a form", "/v1/classify", mw.FormDataContentType(), form.Bytes(), `labels "cat,,dog,truck": entry 2 is empty`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := do(t, http.MethodPost, ts.URL+tc.path, tc.ctype, tc.body)
			var e struct{ Error string }
			json.Unmarshal(r.body, &e)
			if r.status != http.StatusBadRequest || !strings.Contains(e.Error, tc.want) {
				t.Errorf("%d %s; want 400 saying %q", r.status, r.body, tc.want)
			}
		})
	}
	// No stream was made by a request read in part.
	for _, id := range []string{"cam1", "cam", "cam2", "cam3", "form1"} {
		if _, code := streamStatus(t, ts, id); code != http.StatusNotFound {
			t.Errorf("GET stream %s: %d; want 404", id, code)
		}
	}
	// What parses is read as before, escapes decoded.
	got, r := classify(t, ts, "?stream=ok&labels=cat,a+puppy,%74ruck", img)
	if r.status != http.StatusOK || got.Stream == nil || !slices.Equal(got.Labels, []string{"cat", "a puppy", "truck"}) {
		t.Errorf("escaped labels: %d %s", r.status, r.body)
	}
}

// /healthz takes HEAD wherever it takes GET (a balancer's or an
// orchestrator's check may send it): the same status, without the body.
func TestHealthHead(t *testing.T) {
	s, ts := startServer(t, testConfig(t))
	check := func(draining bool) {
		want := http.StatusOK
		if draining {
			want = http.StatusServiceUnavailable
		}
		for _, method := range []string{http.MethodGet, http.MethodHead} {
			r := do(t, method, ts.URL+"/healthz", "", nil)
			if r.status != want || (method == http.MethodHead) != (len(r.body) == 0) {
				t.Errorf("%s /healthz (draining %v): %d %q; want %d", method, draining, r.status, r.body, want)
			}
		}
	}
	check(false)
	r := do(t, http.MethodPut, ts.URL+"/healthz", "", nil)
	if checkError(t, r, http.StatusMethodNotAllowed); r.header.Get("Allow") != "GET, HEAD" {
		t.Errorf("Allow %q; want GET, HEAD", r.header.Get("Allow"))
	}
	if err := s.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	check(true)
}

// Methods lists exactly the methods New serves: every registered method
// that New accepts on a dataset it has a setting for, and none that New
// refuses as multi-view.
func TestMethods(t *testing.T) {
	served := Methods()
	if !slices.Contains(served, "subtta-m") || slices.Contains(served, "dmn") {
		t.Fatalf("Methods() = %v", served)
	}
	for _, m := range tta.Methods() {
		t.Run(m, func(t *testing.T) {
			var err error
			for _, d := range tta.PresetDatasets {
				cfg := testConfig(t)
				cfg.Method, cfg.Dataset = m, d
				var s *Server
				if s, err = New(cfg); errors.Is(err, tta.ErrUnknownDataset) {
					continue
				}
				if s != nil {
					s.Shutdown(t.Context())
				}
				break
			}
			switch listed := slices.Contains(served, m); {
			case listed && err != nil:
				t.Errorf("listed, but New: %v", err)
			case !listed && !errors.Is(err, ErrMultiView):
				t.Errorf("not listed, but New: %v; want ErrMultiView", err)
			}
		})
	}
}

// docs/serving.md names the methods serve takes, and the multi-view
// methods it refuses, as the registry has them.
func TestDocsListMethods(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "docs", "serving.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(strings.Fields(string(b)), " ")
	names := func(start, end string) []string {
		_, after, ok := strings.Cut(text, start)
		if !ok {
			t.Fatalf("docs/serving.md lacks %q", start)
		}
		list, _, _ := strings.Cut(after, end)
		var out []string
		for _, m := range regexp.MustCompile("`([a-z0-9-]+)`").FindAllStringSubmatch(list, -1) {
			out = append(out, m[1])
		}
		return out
	}
	var multi []string
	for _, m := range tta.Methods() {
		if !slices.Contains(Methods(), m) {
			multi = append(multi, m)
		}
	}
	if got := names("`--method` one of ", " ("); !slices.Equal(got, Methods()) {
		t.Errorf("docs/serving.md: --method one of %v; serve takes %v", got, Methods())
	}
	if got := names("the multi-view methods ", " adapt"); !slices.Equal(got, multi) {
		t.Errorf("docs/serving.md: the multi-view methods %v; serve refuses %v", got, multi)
	}
}

// CheckStateStore refuses, without connecting, a store that names none
// serve can open, never showing a password; New refuses it alike.
func TestCheckStateStore(t *testing.T) {
	for _, tc := range []struct{ where, want string }{
		{"", ""},
		{"streams", ""},
		{"redis://127.0.0.1:6379/0", ""},
		{"rediss://user:pw@example.com:6380/2", ""},
		{"foo://x", `"foo://x": want a folder, or redis://host:port/db`},
		{"s3://key:secret@bucket/x", `"s3://key:xxxxx@bucket/x": want a folder`},
		{"redis://user:secret%zz@127.0.0.1/0", `"redis://…": invalid URL escape "%zz"`},
		{"redis://127.0.0.1:6379/x", `"redis://127.0.0.1:6379/x": redis: invalid database number`},
	} {
		err := CheckStateStore(tc.where)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q: %v; want nil", tc.where, err)
		case tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want) || strings.Contains(err.Error(), "secret")):
			t.Errorf("%q: %v; want an error starting %q, without the password", tc.where, err, tc.want)
		}
		if tc.want == "" {
			continue
		}
		cfg := testConfig(t)
		cfg.StateStore = tc.where
		if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "serve: state store "+tc.want) || strings.Contains(err.Error(), "secret") {
			t.Errorf("New with StateStore %q: %v; want %q", tc.where, err, tc.want)
		}
	}
}
