package report

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"time"
)

// Summary is the machine-readable digest of a run, written by WriteJSON.
type Summary struct {
	// Config is the run's full configuration as the caller gives it; it
	// must marshal to JSON.
	Config any `json:"config"`
	// Command is the command line and the config file the run was
	// started with, when the caller gives them (the latest start of a
	// resumed run).
	Command *Command `json:"command,omitempty"`

	// Started and Finished span the records: the earliest start
	// (Finished − Seconds) and the latest finish. For a resumed run the
	// span includes the pause. Zero when no record carries a time.
	Started  time.Time `json:"started,omitzero"`
	Finished time.Time `json:"finished,omitzero"`
	// Seconds is the total wall time of the domains, the sum of the
	// records' Seconds.
	Seconds float64 `json:"seconds"`

	// Methods holds one entry per method, in first-appearance order.
	Methods []MethodSummary `json:"methods"`
	// Records are the records, later duplicates winning, without their
	// per-batch diagnostics.
	Records []Record `json:"records"`
	// Diagnostics are the methods' cosine and per-batch timing summaries
	// (Diagnostics), for the methods that have them.
	Diagnostics []MethodDiagnostics `json:"diagnostics,omitempty"`

	// Environment is that of the run that wrote the summary, if given;
	// Builds counts the records by the build that computed them ("" for
	// records that do not say).
	Environment *Environment   `json:"environment,omitempty"`
	Builds      map[string]int `json:"builds,omitempty"`
}

// Command is how a run was started: its command line and the config
// file that line named.
type Command struct {
	// Args is the command line, the program's name first ("subtta",
	// "eval", "--config", "run.yaml", ...).
	Args []string `json:"args"`
	// ConfigFile is the path of the config file, ConfigText its contents
	// as the run read them (of a results folder's run.json or
	// results.json, its "config" member); empty without one.
	ConfigFile string `json:"config_file,omitempty"`
	ConfigText string `json:"config_text,omitempty"`
}

// MethodSummary is the accuracy and the cost of one method over a run.
type MethodSummary struct {
	Method string `json:"method"`
	// Domains is the number of domains evaluated; MeanAccuracy the mean
	// of their accuracies (percent), each domain weighing the same as in
	// the paper's tables.
	Domains      int     `json:"domains"`
	MeanAccuracy float64 `json:"mean_accuracy"`
	// Severities breaks MeanAccuracy down by severity, in increasing
	// order; severity 0 gathers the domains that are not corruptions.
	Severities []SeverityMean `json:"severities"`

	Samples         int     `json:"samples"`
	Seconds         float64 `json:"seconds"`           // sum over the domains
	ImagesPerSecond float64 `json:"images_per_second"` // Samples/Seconds; 0 when Seconds is 0
}

// SeverityMean is the mean accuracy of a method over the domains of one
// severity.
type SeverityMean struct {
	Severity     int     `json:"severity"`
	Domains      int     `json:"domains"`
	MeanAccuracy float64 `json:"mean_accuracy"`
}

// NewSummary returns the Summary of recs with the given configuration. A
// later record of the same (method, domain) replaces an earlier one.
func NewSummary(config any, recs []Record) Summary {
	recs = Latest(recs)
	s := Summary{Config: config, Records: make([]Record, len(recs)), Methods: []MethodSummary{}}
	type acc struct {
		sum float64
		n   int
	}
	at := make(map[string]int)
	bySev := make(map[string]map[int]*acc)
	for i, r := range recs {
		r.PrincipalCosines, r.SemanticConcentration, r.PredictedClassCosine, r.TrueClassCosine = nil, nil, nil, nil
		s.Records[i] = r
		s.Seconds += r.Seconds
		if s.Builds == nil {
			s.Builds = map[string]int{}
		}
		s.Builds[r.Build]++
		if !r.Finished.IsZero() {
			start := r.Finished.Add(-time.Duration(r.Seconds * float64(time.Second)))
			if s.Started.IsZero() || start.Before(s.Started) {
				s.Started = start
			}
			if r.Finished.After(s.Finished) {
				s.Finished = r.Finished
			}
		}

		j, ok := at[r.Method]
		if !ok {
			j = len(s.Methods)
			at[r.Method] = j
			s.Methods = append(s.Methods, MethodSummary{Method: r.Method})
			bySev[r.Method] = make(map[int]*acc)
		}
		m := &s.Methods[j]
		m.Domains++
		m.MeanAccuracy += r.Accuracy // a sum until the loop below
		m.Samples += r.Samples
		m.Seconds += r.Seconds
		a := bySev[r.Method][r.Severity]
		if a == nil {
			a = new(acc)
			bySev[r.Method][r.Severity] = a
		}
		a.sum += r.Accuracy
		a.n++
	}
	for j := range s.Methods {
		m := &s.Methods[j]
		m.MeanAccuracy /= float64(m.Domains)
		if m.Seconds > 0 {
			m.ImagesPerSecond = float64(m.Samples) / m.Seconds
		}
		for sev, a := range bySev[m.Method] {
			m.Severities = append(m.Severities, SeverityMean{sev, a.n, a.sum / float64(a.n)})
		}
		slices.SortFunc(m.Severities, func(a, b SeverityMean) int { return a.Severity - b.Severity })
	}
	s.Diagnostics = Diagnostics(recs)
	return s
}

// WriteJSON writes s as indented JSON followed by a newline.
func WriteJSON(w io.Writer, s Summary) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("report: summary: %w", err)
	}
	b = append(b, '\n')
	if _, err := w.Write(b); err != nil {
		return fmt.Errorf("report: writing summary: %w", err)
	}
	return nil
}
