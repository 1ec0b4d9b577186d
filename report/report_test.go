package report

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"image/png"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/subtta/subtta/data/corrupt"
)

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func rec(method, corruption string, severity int, acc float64) Record {
	domain := corruption
	if corruption != "" {
		domain = corruption + "/" + string(rune('0'+severity))
	}
	return Record{Method: method, Domain: domain, Corruption: corruption, Severity: severity,
		Samples: 100, Correct: int(acc), Accuracy: acc, Seconds: 2, ImagesPerSecond: 50,
		Finished: t0}
}

func other(method, domain string, acc float64) Record {
	r := rec(method, "", 0, acc)
	r.Domain = domain
	return r
}

func TestMarkdown(t *testing.T) {
	for _, tc := range []struct {
		name string
		recs []Record
		want string
	}{
		{
			// Records out of benchmark order, a missing cell (tent on
			// fog), a later duplicate (source on gaussian_noise).
			name: "two methods",
			recs: []Record{
				rec("source", "fog", 5, 60),
				rec("source", "gaussian_noise", 5, 10),
				rec("tent", "gaussian_noise", 5, 30.1),
				rec("source", "motion_blur", 5, 50.5),
				rec("tent", "motion_blur", 5, 55),
				rec("source", "gaussian_noise", 5, 20),
			},
			want: `| Method | Noise: Gauss. | Blur: Motion | Weather: Fog |   Mean |
|:-------|--------------:|-------------:|-------------:|-------:|
| source |         20.00 |        50.50 |        60.00 |  43.50 |
| tent   |         30.10 |        55.00 |            – | 42.55* |

Means marked with * average only the columns present for the method (– marks a missing cell).
`,
		},
		{
			name: "two severities and other domains",
			recs: []Record{
				rec("a", "shot_noise", 3, 40),
				rec("a", "shot_noise", 1, 80),
				other("a", "cifar10", 90),
				rec("b|c", "shot_noise", 1, 70),
			},
			want: `### Severity 1

| Method | Noise: Shot |  Mean |
|:-------|------------:|------:|
| a      |       80.00 | 80.00 |
| b\|c   |       70.00 | 70.00 |

### Severity 3

| Method | Noise: Shot |  Mean |
|:-------|------------:|------:|
| a      |       40.00 | 40.00 |

### Other domains

| Method | cifar10 |  Mean |
|:-------|--------:|------:|
| a      |   90.00 | 90.00 |
`,
		},
		{
			name: "one severity with other domains",
			recs: []Record{
				other("a", "imagenet_r", 70),
				rec("a", "jpeg_compression", 5, 40),
				rec("a", "contrast", 5, 20),
				rec("a", "no_such_corruption", 5, 30),
			},
			want: `| Method | Digital: Contr. |  JPEG | imagenet_r | no_such_corruption |  Mean |
|:-------|----------------:|------:|-----------:|-------------------:|------:|
| a      |           20.00 | 40.00 |      70.00 |              30.00 | 40.00 |
`,
		},
		{name: "empty", recs: nil, want: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			if err := Markdown(&b, tc.recs); err != nil {
				t.Fatal(err)
			}
			if got := b.String(); got != tc.want {
				t.Errorf("got:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
}

// TestMarkdownColumnOrder checks all 15 corruptions come out in the
// registry's order, each group labelled once.
func TestMarkdownColumnOrder(t *testing.T) {
	names := corrupt.Names()
	var recs []Record
	for i := len(names) - 1; i >= 0; i-- {
		recs = append(recs, rec("m", names[i], 5, float64(i)))
	}
	var b strings.Builder
	if err := Markdown(&b, recs); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(b.String(), "\n")
	header := strings.Fields(strings.ReplaceAll(lines[0], "|", " "))
	want := strings.Fields("Method Noise: Gauss. Shot Impul. Blur: Defoc. Glass Motion Zoom " +
		"Weather: Snow Frost Fog Brit. Digital: Contr. Elastic Pixel JPEG Mean")
	if !reflect.DeepEqual(header, want) {
		t.Errorf("header %q, want %q", header, want)
	}
	row := strings.Fields(strings.ReplaceAll(lines[2], "|", " "))
	if row[1] != "0.00" || row[15] != "14.00" || row[16] != "7.00" {
		t.Errorf("row %q: want cells 0.00 … 14.00 and mean 7.00", row)
	}
}

func TestCSV(t *testing.T) {
	r1 := rec("tent", "fog", 5, 61.25)
	r1.Correct, r1.Seconds, r1.ImagesPerSecond, r1.Steps, r1.Skipped = 61, 1.5, 66.66666666666667, 4, 1
	r2 := other("source", `odd,"name"`, 0.1)
	var b bytes.Buffer
	if err := CSV(&b, []Record{r1, r2, r1}); err != nil {
		t.Fatal(err)
	}
	want := "method,domain,corruption,severity,samples,correct,accuracy,seconds,images_per_second,steps,skipped\n" +
		"tent,fog/5,fog,5,100,61,61.25,1.5,66.66666666666667,4,1\n" +
		"source,\"odd,\"\"name\"\"\",,0,100,0,0.1,2,50,0,0\n" +
		"tent,fog/5,fog,5,100,61,61.25,1.5,66.66666666666667,4,1\n"
	if got := b.String(); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
	rows, err := csv.NewReader(&b).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 4 || rows[2][1] != `odd,"name"` {
		t.Errorf("read back %q", rows)
	}
}

func TestSummaryJSON(t *testing.T) {
	a := rec("tent", "fog", 5, 40)
	a.PrincipalCosines = [][]float64{{1, 0.5}}
	a.SemanticConcentration = []float64{0.3}
	a.PredictedClassCosine = []float64{0.2}
	a.Finished = t0.Add(10 * time.Second) // started at t0+8s
	b := rec("tent", "snow", 5, 50)
	b.Seconds, b.Samples = 6, 200 // started at t0-6s
	c := rec("source", "fog", 5, 30)
	c.Finished = t0.Add(20 * time.Second)
	d := rec("tent", "fog", 5, 60) // replaces a
	d.Finished = t0.Add(15 * time.Second)
	e := other("tent", "cifar10", 90)
	e.Finished = time.Time{} // no time: does not move the span
	e.Seconds = 1

	config := map[string]any{"model": "ViT-B/16", "batch": 200.0, "methods": []any{"source", "tent"}}
	s := NewSummary(config, []Record{a, b, c, d, e})

	if want := t0.Add(-6 * time.Second); !s.Started.Equal(want) {
		t.Errorf("Started %v, want %v", s.Started, want)
	}
	if want := t0.Add(20 * time.Second); !s.Finished.Equal(want) {
		t.Errorf("Finished %v, want %v", s.Finished, want)
	}
	if s.Seconds != 2+6+2+1 {
		t.Errorf("Seconds %v, want 11", s.Seconds)
	}
	wantMethods := []MethodSummary{
		{Method: "tent", Domains: 3, MeanAccuracy: (60 + 50 + 90) / 3.0,
			Severities: []SeverityMean{{0, 1, 90}, {5, 2, 55}},
			Samples:    400, Seconds: 9, ImagesPerSecond: 400 / 9.0},
		{Method: "source", Domains: 1, MeanAccuracy: 30,
			Severities: []SeverityMean{{5, 1, 30}},
			Samples:    100, Seconds: 2, ImagesPerSecond: 50},
	}
	if !reflect.DeepEqual(s.Methods, wantMethods) {
		t.Errorf("Methods\n%+v\nwant\n%+v", s.Methods, wantMethods)
	}
	if len(s.Records) != 4 || s.Records[0].Accuracy != 60 || s.Records[0].PrincipalCosines != nil ||
		s.Records[0].SemanticConcentration != nil || s.Records[0].PredictedClassCosine != nil {
		t.Errorf("Records %+v: want 4, the duplicate replaced, without diagnostics", s.Records)
	}
	if d.PrincipalCosines != nil || a.PrincipalCosines == nil {
		t.Fatal("NewSummary modified its input")
	}

	var buf bytes.Buffer
	if err := WriteJSON(&buf, s); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(buf.Bytes(), []byte("principal_cosines")) {
		t.Error("summary JSON holds per-batch diagnostics")
	}
	var back Summary
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	// Times come back in their own location; compare them as instants.
	if !back.Started.Equal(s.Started) || !back.Finished.Equal(s.Finished) {
		t.Errorf("times %v–%v, want %v–%v", back.Started, back.Finished, s.Started, s.Finished)
	}
	back.Started, back.Finished = s.Started, s.Finished
	for i := range back.Records {
		if !back.Records[i].Finished.Equal(s.Records[i].Finished) {
			t.Errorf("record %d: time %v, want %v", i, back.Records[i].Finished, s.Records[i].Finished)
		}
		back.Records[i].Finished = s.Records[i].Finished
	}
	if !reflect.DeepEqual(back, s) {
		t.Errorf("round trip\n%+v\nwant\n%+v", back, s)
	}

	// An empty run still writes valid JSON with empty lists.
	buf.Reset()
	if err := WriteJSON(&buf, NewSummary(nil, nil)); err != nil {
		t.Fatal(err)
	}
	if got, want := buf.String(), "{\n  \"config\": null,\n  \"seconds\": 0,\n  \"methods\": [],\n  \"records\": []\n}\n"; got != want {
		t.Errorf("empty summary %q, want %q", got, want)
	}
	if err := WriteJSON(&buf, NewSummary(func() {}, nil)); err == nil {
		t.Error("unmarshalable config: no error")
	}
}

func TestReadRecords(t *testing.T) {
	a, b := rec("tent", "fog", 5, 40), rec("tent", "snow", 5, 50)
	a.PrincipalCosines = [][]float64{{0.9, 0.1}, {0.8, 0.2}}
	la, _ := json.Marshal(a)
	lb, _ := json.Marshal(b)
	for _, tc := range []struct {
		name    string
		text    string
		want    []Record
		wantErr string
	}{
		{name: "empty", text: ""},
		{name: "two", text: string(la) + "\n" + string(lb) + "\n", want: []Record{a, b}},
		{name: "blank lines", text: "\n" + string(la) + "\n  \n" + string(lb) + "\n\n", want: []Record{a, b}},
		{name: "no final newline", text: string(la) + "\n" + string(lb), want: []Record{a, b}},
		{name: "truncated last line", text: string(la) + "\n" + string(lb[:len(lb)/2]), want: []Record{a}},
		{name: "truncated only line", text: string(la[:10]), want: nil},
		{name: "malformed middle line", text: string(la) + "\n{\"method\": oops}\n" + string(lb) + "\n",
			wantErr: "line 2"},
		{name: "malformed complete last line", text: string(la) + "\n" + string(lb[:20]) + "\n",
			wantErr: "line 2"},
		{name: "wrong type", text: `{"samples": "many"}` + "\n" + string(la) + "\n", wantErr: "line 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ReadRecords(strings.NewReader(tc.text))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, ErrDamagedLine) {
					t.Fatalf("err %v, want one naming %q that wraps ErrDamagedLine", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("%d records, want %d", len(got), len(tc.want))
			}
			for i := range got {
				if !got[i].Finished.Equal(tc.want[i].Finished) {
					t.Errorf("record %d: time %v, want %v", i, got[i].Finished, tc.want[i].Finished)
				}
				got[i].Finished = tc.want[i].Finished
				if !reflect.DeepEqual(got[i], tc.want[i]) {
					t.Errorf("record %d: %+v, want %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

func TestReadRecordsFile(t *testing.T) {
	dir := t.TempDir()
	recs, err := ReadRecordsFile(filepath.Join(dir, "missing.jsonl"))
	if err != nil || recs != nil {
		t.Errorf("missing file: %v, %v; want no records, no error", recs, err)
	}
	path := filepath.Join(dir, "results.jsonl")
	if err := os.WriteFile(path, []byte("{}\nnot json\n{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = ReadRecordsFile(path)
	if err == nil || !strings.Contains(err.Error(), path+": line 2") {
		t.Errorf("err %v, want one naming %s: line 2", err, path)
	}
}

func TestAppendRecord(t *testing.T) {
	a, b, c := rec("tent", "fog", 5, 40), rec("tent", "snow", 5, 50), rec("mint", "fog", 5, 45)
	lb, _ := json.Marshal(b)
	for _, tc := range []struct {
		name   string
		before string // file contents before appending c; "-" for no file
		want   []Record
	}{
		{name: "new file", before: "-", want: []Record{c}},
		{name: "empty file", before: "", want: []Record{c}},
		{name: "partial last line", before: "{\"method\":\"tent\",\"domain\":\"fog/5\"}\n{\"method\":\"te",
			want: []Record{{Method: "tent", Domain: "fog/5"}, c}},
		{name: "partial only line", before: "{\"method\":\"te", want: []Record{c}},
		{name: "complete line without newline", before: string(lb), want: []Record{b, c}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "results.jsonl")
			if tc.before != "-" {
				if err := os.WriteFile(path, []byte(tc.before), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := AppendRecord(path, c); err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.HasSuffix(data, []byte("}\n")) || bytes.Count(data, []byte("\n")) != len(tc.want) {
				t.Errorf("file %q: want %d newline-terminated lines", data, len(tc.want))
			}
			// Strict read: every line must parse.
			got, err := ReadRecords(bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("%d records, want %d", len(got), len(tc.want))
			}
			for i := range got {
				if got[i].Method != tc.want[i].Method || got[i].Domain != tc.want[i].Domain {
					t.Errorf("record %d: %s %s, want %s %s", i, got[i].Method, got[i].Domain, tc.want[i].Method, tc.want[i].Domain)
				}
			}
		})
	}

	// Appending several records, with a long partial line (longer than
	// the backwards read's chunk) in between.
	path := filepath.Join(t.TempDir(), "results.jsonl")
	for _, r := range []Record{a, b} {
		if err := AppendRecord(path, r); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"method":"x","principal_cosines":[[` + strings.Repeat("0.5,", 50000))
	f.Close()
	if err := AppendRecord(path, c); err != nil {
		t.Fatal(err)
	}
	got, err := ReadRecordsFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].Domain != "fog/5" || got[1].Domain != "snow/5" || got[2].Method != "mint" {
		t.Errorf("got %d records %+v, want tent fog, tent snow, mint fog", len(got), got)
	}

	bad := a
	bad.Accuracy = math.NaN()
	if err := AppendRecord(path, bad); err == nil || !strings.Contains(err.Error(), "fog/5") {
		t.Errorf("NaN accuracy: err %v, want one naming the domain", err)
	}
}

// diagRecords returns records with diagnostics for methods "source" and
// "subtta-m" on three corruptions, and without for "tent".
func diagRecords() []Record {
	rng := rand.New(rand.NewPCG(1, 2))
	var recs []Record
	for _, m := range []string{"source", "tent", "subtta-m"} {
		for i, c := range []string{"gaussian_noise", "fog", "pixelate"} {
			r := rec(m, c, 5, 30+10*float64(i)+rng.Float64()*10)
			if m != "tent" {
				for range 8 {
					cos := make([]float64, 10)
					for k := range cos {
						cos[k] = 1 - rng.Float64()*rng.Float64()
					}
					r.PrincipalCosines = append(r.PrincipalCosines, cos)
					r.SemanticConcentration = append(r.SemanticConcentration, 0.2+0.3*rng.Float64())
				}
			}
			recs = append(recs, r)
		}
	}
	return recs
}

func TestPlots(t *testing.T) {
	noDiag := []Record{rec("tent", "fog", 5, 40), other("tent", "cifar10", 90)}
	twoSev := append(diagRecords(), rec("tent", "fog", 3, 70))
	constant := []Record{rec("m", "fog", 5, 40)}
	constant[0].PrincipalCosines = [][]float64{{1, 1, 1}}
	constant[0].SemanticConcentration = []float64{0.5, 0.5}
	for _, tc := range []struct {
		name string
		recs []Record
		want []string
	}{
		{name: "diagnostics", recs: diagRecords(),
			want: []string{AccuracyPlot, PrincipalAnglesPlot, SemanticConcentrationPlot}},
		{name: "two severities", recs: twoSev,
			want: []string{AccuracyPlot, PrincipalAnglesPlot, SemanticConcentrationPlot}},
		{name: "constant diagnostics", recs: constant,
			want: []string{AccuracyPlot, PrincipalAnglesPlot, SemanticConcentrationPlot}},
		{name: "no diagnostics", recs: noDiag, want: []string{AccuracyPlot}},
		{name: "no records", recs: nil, want: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "plots")
			paths, err := Plots(dir, tc.recs)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, p := range paths {
				names = append(names, filepath.Base(p))
				f, err := os.Open(p)
				if err != nil {
					t.Fatal(err)
				}
				img, err := png.Decode(f)
				f.Close()
				if err != nil {
					t.Fatalf("%s: %v", p, err)
				}
				if b := img.Bounds(); b.Dx() < 200 || b.Dy() < 200 {
					t.Errorf("%s: %v image", p, b)
				}
			}
			if !reflect.DeepEqual(names, tc.want) {
				t.Errorf("wrote %q, want %q", names, tc.want)
			}
			entries, _ := os.ReadDir(dir)
			if len(entries) != len(tc.want) {
				t.Errorf("%d files in %s, want %d (no temporary files left)", len(entries), dir, len(tc.want))
			}
		})
	}
}

func TestPlotsDeterministic(t *testing.T) {
	if testing.Short() {
		t.Skip("renders the figures twice")
	}
	recs := diagRecords()
	d1, d2 := t.TempDir(), t.TempDir()
	p1, err := Plots(d1, recs)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Plots(d2, recs); err != nil {
		t.Fatal(err)
	}
	for _, p := range p1 {
		a, _ := os.ReadFile(p)
		b, _ := os.ReadFile(filepath.Join(d2, filepath.Base(p)))
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs between two runs", filepath.Base(p))
		}
	}
}
