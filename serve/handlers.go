package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"io"
	"math"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/clip"
	"github.com/subtta/subtta/data"
)

// ClassifyResponse is the answer of POST /v1/classify.
type ClassifyResponse struct {
	Model  string    `json:"model"`
	Labels []string  `json:"labels"`
	Probs  []float64 `json:"probs"`  // in label order
	Logits []float64 `json:"logits"` // logit_scale · cos(image, label)
	Label  string    `json:"label"`  // the most probable label
	// RequestID echoes the request's X-Request-Id header.
	RequestID string        `json:"request_id,omitempty"`
	Stream    *StreamAnswer `json:"stream,omitempty"`
}

// StreamAnswer says which step of a stream answered a request.
type StreamAnswer struct {
	ID        string `json:"id"`
	Method    string `json:"method"`
	Batch     int64  `json:"batch"`      // the step's index in the stream, from 0
	BatchSize int    `json:"batch_size"` // the images the step took
	Position  int    `json:"position"`   // this image's row in the batch
	Steps     int    `json:"steps"`      // optimizer steps the batch took
}

// EmbedResponse is the answer of POST /v1/embed: one feature vector per
// image or text.
type EmbedResponse struct {
	Model      string      `json:"model"`
	Features   [][]float64 `json:"features"`
	Texts      []string    `json:"texts,omitempty"`
	Normalized bool        `json:"normalized"`
}

// StreamStatus is the answer of GET /v1/streams/{id}.
type StreamStatus struct {
	ID        string   `json:"id"`
	Method    string   `json:"method"`
	Labels    []string `json:"labels"`
	Templates []string `json:"templates"`
	InMemory  bool     `json:"in_memory"`
	Pending   int      `json:"pending"` // requests waiting for the next batch
	Images    int64    `json:"images"`
	Batches   int64    `json:"batches"`
	Steps     int64    `json:"steps"`   // optimizer steps
	Skipped   int64    `json:"skipped"` // steps skipped for a non-finite gradient
	// LastLoss are the last batch's losses by name ("align", "mint", ...).
	LastLoss map[string]float64 `json:"last_loss,omitempty"`
	// PrincipalAngles summarise the cosines of the principal angles between
	// the last batch's visual subspace and the text subspace (SubTTA).
	PrincipalAngles *AngleSummary `json:"principal_angles,omitempty"`
	Created         time.Time     `json:"created"`
	// Restored says whether the stream was read back from the state
	// directory (where it continued exactly as saved).
	Restored bool `json:"restored"`
}

// AngleSummary summarises principal-angle cosines.
type AngleSummary struct {
	Rank int     `json:"rank"`
	Mean float64 `json:"mean_cos"`
	Min  float64 `json:"min_cos"`
	Max  float64 `json:"max_cos"`
}

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

// readInput parses a request: the raw body with an image content type, a
// multipart form, or (when jsonOK) a JSON object; labels, templates,
// stream and normalize from the query string or the form.
func (s *Server) readInput(w http.ResponseWriter, r *http.Request, jsonOK bool) (*input, error) {
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
	q := r.URL.Query()
	fields := map[string][]string{}
	for _, k := range []string{"labels", "template", "stream", "normalize"} {
		if v, ok := q[k]; ok {
			fields[k] = v
		}
	}
	for k := range q {
		if _, ok := fields[k]; !ok {
			return nil, errorf(http.StatusBadRequest, "unknown parameter %s (want labels, template, stream, normalize)", quote(k, maxEcho))
		}
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
			switch name {
			case "image":
				if in.image != nil {
					return nil, errorf(http.StatusBadRequest, "one image per request")
				}
				if in.image, err = io.ReadAll(p); err != nil {
					return nil, readError(err)
				}
			case "labels", "template", "stream", "normalize", "text":
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
			default:
				return nil, errorf(http.StatusBadRequest, "unknown form field %s (want image, labels, template, stream, normalize, text)", quote(name, maxEcho))
			}
			p.Close()
		}
	case mt == "application/json" && jsonOK:
		var req struct {
			Texts     []string `json:"texts"`
			Normalize bool     `json:"normalize"`
		}
		dec := json.NewDecoder(body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			var mb *http.MaxBytesError
			if errors.As(err, &mb) {
				return nil, err
			}
			return nil, errorf(http.StatusBadRequest, "JSON body: %s (want {\"texts\": [...], \"normalize\": bool})", shorten(err.Error(), maxEcho))
		}
		in.texts, in.normalize = req.Texts, req.Normalize
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
		in.labels = splitLabels(v[0])
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

// readError is the error of a body that could not be read: too large
// (413, from MaxBytesReader), or cut off by the client (400).
func readError(err error) error {
	var mb *http.MaxBytesError
	if errors.As(err, &mb) {
		return err
	}
	return errorf(http.StatusBadRequest, "reading the request body: %v", err)
}

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

// splitLabels splits a comma-separated list, dropping blanks.
func splitLabels(v string) []string {
	out := []string{}
	for _, l := range strings.Split(v, ",") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

func checkLabels(labels []string, maxN, maxBytes int) error {
	switch {
	case len(labels) < 2:
		return fmt.Errorf("%d labels; give at least 2, comma-separated", len(labels))
	case len(labels) > maxN:
		return fmt.Errorf("%d labels, more than the limit of %d", len(labels), maxN)
	}
	seen := make(map[string]bool, len(labels))
	for _, l := range labels {
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

func (s *Server) handleClassify(w http.ResponseWriter, r *http.Request) error {
	in, err := s.readInput(w, r, false)
	if err != nil {
		return err
	}
	if in.image == nil {
		return errorf(http.StatusBadRequest, "no image: send it as the body, or as the image part of a multipart form")
	}
	if in.texts != nil {
		return errorf(http.StatusBadRequest, "text is a field of /v1/embed, not of /v1/classify")
	}
	resp := ClassifyResponse{Model: s.cfg.ModelVersion, RequestID: requestID(r)}
	var logits []float64
	var pred int
	if in.stream == "" {
		labels, templates := in.labels, in.templates
		if labels == nil {
			labels = s.cfg.Labels
		}
		if templates == nil {
			templates = s.cfg.Templates
		}
		h, err := s.heads.get(labels, templates, false)
		if err != nil {
			return err
		}
		f, err := s.frozenFeatures(r.Context(), in.pixels, 1)
		if err != nil {
			return err
		}
		logits, pred = h.frozenLogits(f, s.cfg.Model.LogitScale)
		resp.Labels = labels
	} else {
		var a answer
		for range 3 { // a stream closed under us is looked up again
			st, err := s.stream(r.Context(), in.stream, in.labels, in.templates)
			if err != nil {
				return err
			}
			a, err = st.submit(r.Context(), in.pixels)
			if errors.Is(err, errStreamClosed) {
				continue
			}
			if err != nil {
				return err
			}
			resp.Labels = st.labels
			break
		}
		if a.logits == nil {
			return errorf(http.StatusServiceUnavailable, "stream %s keeps closing; retry", in.stream)
		}
		logits, pred = a.logits, a.pred
		resp.Stream = &StreamAnswer{ID: in.stream, Method: s.preset.Method, Batch: a.batch, BatchSize: a.size, Position: a.position, Steps: a.steps}
	}
	resp.Logits, resp.Probs, resp.Label = logits, clip.SoftmaxRow(logits), resp.Labels[pred]
	if err := r.Context().Err(); err != nil && !errors.Is(context.Cause(r.Context()), errTimeout) {
		return err // the client has gone
	}
	// A stream's answer is written even past Timeout: the stream adapted
	// on the image (submit).
	writeJSON(w, http.StatusOK, resp)
	return nil
}

// frozenFeatures encodes images with the source weights, concurrently with
// other frozen requests and with streams' steps.
func (s *Server) frozenFeatures(ctx context.Context, px []float32, n int) (*mat.Dense, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f, err := s.frozen.EncodeImage(px, n)
	if err != nil {
		return nil, err
	}
	sh := f.Value().Shape()
	return mat.NewDense(sh[0], sh[1], f.Value().Data().F64()), nil
}

func (s *Server) handleEmbed(w http.ResponseWriter, r *http.Request) error {
	in, err := s.readInput(w, r, true)
	if err != nil {
		return err
	}
	switch {
	case in.labels != nil || in.templates != nil || in.stream != "":
		return errorf(http.StatusBadRequest, "/v1/embed takes an image or texts, and normalize; labels, template and stream are for /v1/classify")
	case in.image != nil && len(in.texts) > 0:
		return errorf(http.StatusBadRequest, "give an image or texts, not both")
	case in.image == nil && len(in.texts) == 0:
		return errorf(http.StatusBadRequest, "nothing to embed: send an image, or JSON {\"texts\": [...]}")
	case len(in.texts) > s.cfg.MaxLabels:
		return errorf(http.StatusBadRequest, "%d texts, more than the limit of %d", len(in.texts), s.cfg.MaxLabels)
	}
	resp := EmbedResponse{Model: s.cfg.ModelVersion, Normalized: in.normalize}
	var f *mat.Dense
	if in.image != nil {
		if f, err = s.frozenFeatures(r.Context(), in.pixels, 1); err != nil {
			return err
		}
	} else {
		ids := make([][]int, len(in.texts))
		for i, t := range in.texts {
			if err := checkText(t, s.cfg.MaxLabelBytes); err != nil {
				return errorf(http.StatusBadRequest, "text %d: %v", i, err)
			}
			if ids[i], err = s.cfg.Tokenizer.Tokenize(t, s.cfg.Model.Config.Text.ContextLength, true); err != nil {
				return errorf(http.StatusBadRequest, "text %d: %v", i, err)
			}
		}
		t, err := s.frozen.EncodeText(ids)
		if err != nil {
			return err
		}
		sh := t.Value().Shape()
		f = mat.NewDense(sh[0], sh[1], t.Value().Data().F64())
		resp.Texts = in.texts
	}
	n, _ := f.Dims()
	for i := range n {
		row := slices.Clone(f.RawRowView(i))
		if in.normalize {
			var ss float64
			for _, v := range row {
				ss += v * v
			}
			if ss > 0 {
				for j := range row {
					row[j] /= math.Sqrt(ss)
				}
			}
		}
		resp.Features = append(resp.Features, row)
	}
	writeJSON(w, http.StatusOK, resp)
	return nil
}

func (s *Server) handleStreamGet(w http.ResponseWriter, r *http.Request) error {
	id, err := streamID(r.PathValue("id"))
	if err != nil {
		return err
	}
	s.mu.Lock()
	st, ok := s.streams[id]
	s.mu.Unlock()
	sv, err := s.readState(id)
	if ok && isClosed(st.ready) && st.loadErr == nil {
		if err != nil {
			// The file cannot be read: the stream's next save will
			// say so; its copy in memory is what there is.
			s.log.Error("serve: reading stream state", "stream", id, "err", err)
			sv = nil
		}
		st.mu.Lock()
		status := StreamStatus{ID: id, Method: s.preset.Method, Labels: st.labels, Templates: st.templates, InMemory: true,
			Pending: len(st.pending)}
		stats := st.stats
		if sv != nil && (!st.onDisk || sv.Stamp != st.stamp) {
			// Another server has saved the stream since this one read
			// it: its counters are the stream's.
			stats = sv.Stats
		}
		status.fill(stats)
		st.mu.Unlock()
		writeJSON(w, http.StatusOK, status)
		return nil
	}
	if err != nil {
		return err
	}
	if sv == nil {
		if ok {
			return errorf(http.StatusConflict, "stream %s is being loaded", id)
		}
		return errorf(http.StatusNotFound, "no stream %s", id)
	}
	status := StreamStatus{ID: id, Method: sv.Method, Labels: sv.Labels, Templates: sv.Templates}
	status.fill(sv.Stats)
	writeJSON(w, http.StatusOK, status)
	return nil
}

func (st *StreamStatus) fill(s streamStats) {
	st.Images, st.Batches, st.Steps, st.Skipped = s.Images, s.Batches, s.Steps, s.Skipped
	st.LastLoss, st.Created, st.Restored = s.LastLoss, s.Created, s.Restored
	if len(s.Cosines) > 0 {
		a := &AngleSummary{Rank: len(s.Cosines), Min: math.Inf(1), Max: math.Inf(-1)}
		for _, c := range s.Cosines {
			a.Mean += c / float64(len(s.Cosines))
			a.Min, a.Max = min(a.Min, c), max(a.Max, c)
		}
		st.PrincipalAngles = a
	}
}

func (s *Server) handleStreamDelete(w http.ResponseWriter, r *http.Request) error {
	id, err := streamID(r.PathValue("id"))
	if err != nil {
		return err
	}
	s.mu.Lock()
	st, ok := s.streams[id]
	if !ok {
		// Not in memory: its files go now, under the lock, so that no
		// request reads them back meanwhile.
		// A corrupt state file is deleted too.
		if sv, err := s.readState(id); err == nil && sv == nil {
			s.mu.Unlock()
			return errorf(http.StatusNotFound, "no stream %s", id)
		}
		s.removeState(id)
		s.mu.Unlock()
		writeJSON(w, http.StatusOK, map[string]string{"deleted": id})
		return nil
	}
	s.mu.Unlock()
	st.mu.Lock()
	st.deleted, st.closing = true, true
	st.mu.Unlock()
	st.wake()
	select {
	case <-st.exited:
	case <-r.Context().Done():
		return r.Context().Err()
	}
	writeJSON(w, http.StatusOK, map[string]string{"deleted": id})
	return nil
}
