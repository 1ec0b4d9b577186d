package serve

// This file decodes requests: the body (raw image, multipart form or JSON)
// and the query string into an input, within the body limit, and checks
// what a client sends; handlers.go answers them.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"io"
	"maps"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/subtta/subtta/data"
)

// input is a parsed request.
type input struct {
	image     []byte
	pixels    []float32
	labels    []string // nil when not given
	templates []string // nil when not given
	stream    string
	texts     []string
	normalize bool
}

// maxFieldBytes limits a form field other than the image.
const maxFieldBytes = 1 << 20

// The parameters each endpoint takes, in the query string or as form
// fields (with the image, and embed's text fields): another endpoint's,
// which would do nothing, is refused as an unknown one is.
var (
	classifyParams = []string{"labels", "template", "stream"}
	embedParams    = []string{"normalize"}
)

// paramError is the error of a query parameter or form field (what)
// named name that the endpoint path, taking want, does not take.
func paramError(what, name, path string, want []string) error {
	other, otherPath := embedParams, "/v1/embed"
	if path == otherPath {
		other, otherPath = classifyParams, "/v1/classify"
	}
	if slices.Contains(other, name) {
		return errorf(http.StatusBadRequest, "%s %s is for %s, not %s (which takes %s)", what, name, otherPath, path, strings.Join(want, ", "))
	}
	return errorf(http.StatusBadRequest, "unknown %s %s (want %s)", what, quote(name, maxEcho), strings.Join(want, ", "))
}

// readInput parses a request: the raw body with an image content type, a
// multipart form, or for embed a JSON object; the endpoint's parameters
// (classifyParams or embedParams) from the query string or the form.
func (s *Server) readInput(w http.ResponseWriter, r *http.Request, embed bool) (*input, error) {
	// Every way a body arrives (a raw image, a multipart part or field, a
	// JSON object) reads it through body, so that no more than MaxBodyBytes
	// of it is ever read; a declared length beyond it is refused before any
	// of it is.
	if r.ContentLength > s.cfg.MaxBodyBytes {
		return nil, &http.MaxBytesError{Limit: s.cfg.MaxBodyBytes}
	}
	body := http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
	r.Body = body // r.MultipartReader reads r.Body
	defer discard(body)
	in := &input{}
	params, path, jsonOK := classifyParams, "/v1/classify", false
	if embed {
		params, path, jsonOK = embedParams, "/v1/embed", true
	}
	q, err := parseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, err
	}
	fields := map[string][]string{}
	for _, k := range slices.Sorted(maps.Keys(q)) {
		if !slices.Contains(params, k) {
			return nil, paramError("parameter", k, path, params)
		}
		fields[k] = q[k]
	}
	ct := r.Header.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	if ct == "" || err != nil {
		return nil, errorf(http.StatusUnsupportedMediaType, "Content-Type %s: send an image (image/jpeg, image/png, image/gif), multipart/form-data with an image part, or JSON", quote(ct, maxEcho))
	}
	switch {
	case strings.HasPrefix(mt, "image/") || mt == "application/octet-stream":
		if in.image, err = io.ReadAll(body); err != nil {
			return nil, readError(err)
		}
	case mt == "multipart/form-data":
		mr, err := r.MultipartReader()
		if err != nil {
			return nil, errorf(http.StatusBadRequest, "multipart form: %v", err)
		}
		for {
			p, err := mr.NextPart()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, readError(err)
			}
			name := p.FormName()
			switch {
			case name == "image":
				if in.image != nil {
					return nil, errorf(http.StatusBadRequest, "one image per request")
				}
				if in.image, err = io.ReadAll(p); err != nil {
					return nil, readError(err)
				}
			case slices.Contains(params, name) || name == "text" && embed:
				b, err := io.ReadAll(io.LimitReader(p, maxFieldBytes+1))
				if err != nil {
					return nil, readError(err)
				}
				if len(b) > maxFieldBytes {
					return nil, errorf(http.StatusRequestEntityTooLarge, "form field %s longer than %d bytes", name, maxFieldBytes)
				}
				if name == "text" {
					in.texts = append(in.texts, string(b))
				} else {
					fields[name] = append(fields[name], string(b))
				}
			case name == "text":
				return nil, errorf(http.StatusBadRequest, "form field text is for /v1/embed, not /v1/classify")
			default:
				want := append([]string{"image"}, params...)
				if embed {
					want = append(want, "text")
				}
				return nil, paramError("form field", name, path, want)
			}
			p.Close()
		}
	case mt == "application/json" && jsonOK:
		if in.texts, in.normalize, err = readJSON(body); err != nil {
			return nil, err
		}
	default:
		want := "an image (image/jpeg, image/png, image/gif) or multipart/form-data with an image part"
		if jsonOK {
			want += ", or JSON {\"texts\": [...]}"
		}
		return nil, errorf(http.StatusUnsupportedMediaType, "Content-Type %s: send %s", quote(mt, maxEcho), want)
	}
	for k, v := range fields {
		if len(v) > 1 && k != "template" {
			return nil, errorf(http.StatusBadRequest, "%s given %d times", k, len(v))
		}
	}
	if v, ok := fields["labels"]; ok {
		if in.labels, err = splitLabels(v[0]); err != nil {
			return nil, errorf(http.StatusBadRequest, "labels %s: %v", quote(v[0], maxEcho), err)
		}
		if err := checkLabels(in.labels, s.cfg.MaxLabels, s.cfg.MaxLabelBytes); err != nil {
			return nil, errorf(http.StatusBadRequest, "labels: %v", err)
		}
	}
	if v, ok := fields["template"]; ok {
		in.templates = v
		if err := checkTemplates(in.templates, s.cfg.MaxTemplates, s.cfg.MaxLabelBytes); err != nil {
			return nil, errorf(http.StatusBadRequest, "template: %v", err)
		}
	}
	if v, ok := fields["stream"]; ok {
		if in.stream, err = streamID(v[0]); err != nil {
			return nil, err
		}
	}
	if v, ok := fields["normalize"]; ok {
		switch v[0] {
		case "true", "1":
			in.normalize = true
		case "false", "0", "":
		default:
			return nil, errorf(http.StatusBadRequest, "normalize %s: want true or false", quote(v[0], maxEcho))
		}
	}
	if in.image != nil {
		// Decoding holds the whole bitmap: a few at a time, not
		// MaxConcurrent of them (up to 100 MB each at MaxPixels).
		select {
		case s.decoding <- struct{}{}:
		case <-r.Context().Done():
			return nil, r.Context().Err()
		}
		in.pixels, err = s.decode(in.image)
		<-s.decoding
		if err != nil {
			return nil, err
		}
	}
	return in, nil
}

// jsonWant is the JSON body embed takes, for error messages.
const jsonWant = `(want {"texts": [...], "normalize": bool})`

// readJSON reads embed's JSON body: one object, with texts (strings, not
// null) and normalize (a bool, not null), and nothing after it.
func readJSON(body io.Reader) (texts []string, normalize bool, err error) {
	var req struct {
		Texts     []*string       `json:"texts"`
		Normalize json.RawMessage `json:"normalize"`
	}
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	tooLarge := func(err error) bool {
		var mb *http.MaxBytesError
		return errors.As(err, &mb)
	}
	if err := dec.Decode(&req); err != nil {
		if tooLarge(err) {
			return nil, false, err
		}
		return nil, false, errorf(http.StatusBadRequest, "JSON body: %s %s", shorten(err.Error(), maxEcho), jsonWant)
	}
	end := dec.InputOffset()
	switch _, err := dec.Token(); {
	case errors.Is(err, io.EOF):
	case tooLarge(err):
		return nil, false, err
	default:
		return nil, false, errorf(http.StatusBadRequest, "JSON body: data after the object, which ends at byte %d: send one object %s", end, jsonWant)
	}
	for i, t := range req.Texts {
		if t == nil {
			return nil, false, errorf(http.StatusBadRequest, "JSON body: texts[%d] is null: want a string", i)
		}
		texts = append(texts, *t)
	}
	if req.Normalize != nil {
		if string(req.Normalize) == "null" {
			return nil, false, errorf(http.StatusBadRequest, "JSON body: normalize is null: want true or false")
		}
		if err := json.Unmarshal(req.Normalize, &normalize); err != nil {
			return nil, false, errorf(http.StatusBadRequest, "JSON body: normalize: %s %s", shorten(err.Error(), maxEcho), jsonWant)
		}
	}
	return texts, normalize, nil
}

// readError is the error of a body that could not be read: too large
// (413, from MaxBytesReader), or cut off by the client (400).
func readError(err error) error {
	var mb *http.MaxBytesError
	if errors.As(err, &mb) {
		return err
	}
	return errorf(http.StatusBadRequest, "reading the request body: %v", err)
}

// acceptedFormats are the image formats a request may send (image's
// names): those docs/serving.md documents.
var acceptedFormats = map[string]bool{"png": true, "jpeg": true, "gif": true}

// decode checks an encoded image's dimensions from its header, then decodes
// and preprocesses it as subtta eval does (data.DecodeRGB, the CLIP
// preprocessor).
func (s *Server) decode(b []byte) ([]float32, error) {
	if len(b) == 0 {
		return nil, errorf(http.StatusBadRequest, "empty image")
	}
	cfg, format, err := image.DecodeConfig(bytes.NewReader(b))
	if err != nil {
		if errors.Is(err, image.ErrFormat) {
			return nil, errorf(http.StatusBadRequest, "not a PNG, JPEG or GIF image")
		}
		return nil, errorf(http.StatusBadRequest, "corrupt image header: %v", err)
	}
	if !acceptedFormats[format] {
		// Decoders other packages register (TIFF, BMP, WebP) stay out:
		// the formats accepted are the formats documented.
		return nil, errorf(http.StatusUnsupportedMediaType, "a %s image: send a PNG, JPEG or GIF image", quote(format, maxEcho))
	}
	if cfg.Width <= 0 || cfg.Height <= 0 {
		return nil, errorf(http.StatusBadRequest, "%s image has no pixels (%d×%d)", format, cfg.Width, cfg.Height)
	}
	if cfg.Width > s.cfg.MaxPixels/cfg.Height {
		return nil, errorf(http.StatusRequestEntityTooLarge, "%s image is %d×%d, more than %d pixels", format, cfg.Width, cfg.Height, s.cfg.MaxPixels)
	}
	img, err := data.DecodeRGB("image", b)
	if err != nil {
		return nil, errorf(http.StatusBadRequest, "%s", strings.TrimPrefix(err.Error(), "data: image: "))
	}
	px, err := s.pre.Transform(nil, img)
	if err != nil {
		return nil, errorf(http.StatusBadRequest, "%v", err)
	}
	return px, nil
}

// parseQuery parses a request's query string. A query that does not parse
// (a ";" between parameters, a "%" not followed by two hex digits) is
// refused (400), naming the first pair that does not, rather than read
// without that pair, as url.URL.Query does: a stream request whose stream=
// was dropped would be answered by the frozen model, and its client would
// believe its stream adapts.
func parseQuery(raw string) (url.Values, error) {
	q, err := url.ParseQuery(raw)
	if err == nil {
		return q, nil
	}
	bad := raw
	for pair := range strings.SplitSeq(raw, "&") {
		if _, perr := url.ParseQuery(pair); perr != nil {
			bad, err = pair, perr
			break
		}
	}
	return nil, errorf(http.StatusBadRequest, "query string: %s does not parse (%v): separate parameters with &, and percent-encode ;, %% and & in a value", quote(bad, maxEcho), err)
}

// splitLabels splits a comma-separated list of labels, trimming the spaces
// around each. A list that is blank is no label (checkLabels says how many
// it wants); an empty entry in a list ("cat,,dog", "cat,dog,") is an
// error naming it, not dropped: a list whose labels were not all read is
// not the list the client meant.
func splitLabels(v string) ([]string, error) {
	out := []string{}
	if strings.TrimSpace(v) == "" {
		return out, nil
	}
	for i, l := range strings.Split(v, ",") {
		if l = strings.TrimSpace(l); l == "" {
			return nil, fmt.Errorf("entry %d is empty", i+1)
		}
		out = append(out, l)
	}
	return out, nil
}

func checkLabels(labels []string, maxN, maxBytes int) error {
	switch {
	case len(labels) < 2:
		return fmt.Errorf("%d labels; give at least 2, comma-separated", len(labels))
	case len(labels) > maxN:
		return fmt.Errorf("%d labels, more than the limit of %d", len(labels), maxN)
	}
	seen := make(map[string]bool, len(labels))
	for i, l := range labels {
		if strings.TrimSpace(l) == "" {
			return fmt.Errorf("label %d is empty", i+1)
		}
		if err := checkText(l, maxBytes); err != nil {
			return err
		}
		if seen[l] {
			return fmt.Errorf("%s is given twice", quote(l, maxEcho))
		}
		seen[l] = true
	}
	return nil
}

func checkTemplates(templates []string, maxN, maxBytes int) error {
	if len(templates) == 0 || len(templates) > maxN {
		return fmt.Errorf("%d templates; give 1 to %d", len(templates), maxN)
	}
	for _, t := range templates {
		if err := checkText(t, maxBytes); err != nil {
			return err
		}
		if !strings.Contains(t, "{}") {
			return fmt.Errorf("template %s has no {} for the label", quote(t, maxEcho))
		}
	}
	return nil
}

func checkText(t string, maxBytes int) error {
	switch {
	case !utf8.ValidString(t):
		return fmt.Errorf("%s is not UTF-8", quote(t, maxEcho))
	case len(t) > maxBytes:
		return fmt.Errorf("%s is more than %d bytes", quote(t, 40), maxBytes)
	}
	return nil
}

// An error message quotes a client's string (an id, a label, a field) cut
// to maxIDEcho (ids) or maxEcho characters.
const (
	maxIDEcho = 64
	maxEcho   = 200
)

// quote quotes s for an error message: whole when at most n characters
// long, else its first n characters, an ellipsis and its full length.
func quote(s string, n int) string {
	if c := cut(s, n); c != s {
		return fmt.Sprintf("%q… (%d bytes)", c, len(s))
	}
	return strconv.Quote(s)
}

// shorten is s when at most n characters long, else its first n
// characters, an ellipsis and its full length.
func shorten(s string, n int) string {
	if c := cut(s, n); c != s {
		return fmt.Sprintf("%s… (%d bytes)", c, len(s))
	}
	return s
}

// cut is s cut to its first n characters (bytes that are not UTF-8 count
// one each).
func cut(s string, n int) string {
	for i := range s {
		if n == 0 {
			return s[:i]
		}
		n--
	}
	return s
}

// requestID is the client's X-Request-Id, cut to 128 bytes.
func requestID(r *http.Request) string {
	id := r.Header.Get("X-Request-Id")
	if len(id) > 128 {
		id = id[:128]
	}
	return id
}

// maxKeyBytes limits an Idempotency-Key.
const maxKeyBytes = 128

// idempotencyKey is the request's Idempotency-Key header: "" when absent,
// else 1 to maxKeyBytes printable ASCII characters. A stream request with a
// key is answered once: sent again (a retry after a lost connection, to
// this server or another on the same store), it gets the first answer.
func idempotencyKey(r *http.Request) (string, error) {
	vs := r.Header.Values("Idempotency-Key")
	if len(vs) == 0 {
		return "", nil
	}
	k := vs[0]
	ok := len(vs) == 1 && k != "" && len(k) <= maxKeyBytes
	for i := 0; ok && i < len(k); i++ {
		ok = k[i] > ' ' && k[i] < 0x7f
	}
	if !ok {
		return "", errorf(http.StatusBadRequest, "Idempotency-Key %s: want one header of 1 to %d printable ASCII characters without spaces", quote(k, maxEcho), maxKeyBytes)
	}
	return k, nil
}
