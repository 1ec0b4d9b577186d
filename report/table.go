package report

import (
	"slices"
	"strconv"

	"github.com/subtta/subtta/data/corrupt"
)

// Latest returns recs with every (method, domain) kept once: at the
// position of its first record, with the contents of its last, so that a
// rerun domain replaces the earlier result without reordering the table.
func Latest(recs []Record) []Record {
	type key struct{ method, domain string }
	at := make(map[key]int, len(recs))
	var out []Record
	for _, r := range recs {
		k := key{r.Method, r.Domain}
		if i, ok := at[k]; ok {
			out[i] = r
			continue
		}
		at[k] = len(out)
		out = append(out, r)
	}
	return out
}

// column is one domain column of a table.
type column struct {
	key   string // corruption name, or "\x00"+domain for other domains
	label string // short header label
	group string // "Noise", "Blur", "Weather", "Digital"; "" for other domains
}

// table is the accuracies of one severity, ready to be printed or plotted.
type table struct {
	title    string // "Severity 5", "Other domains"; "" when it is the only table
	severity int    // 0 for the table of other domains
	columns  []column
	methods  []string                      // rows, in first-appearance order
	cells    map[string]map[string]float64 // method → column key → accuracy
}

// mean returns the mean accuracy of method over the columns it has, the
// number of those columns, and whether it has them all.
func (t *table) mean(method string) (mean float64, n int, complete bool) {
	row := t.cells[method]
	var sum float64
	for _, c := range t.columns {
		if a, ok := row[c.key]; ok {
			sum += a
			n++
		}
	}
	if n == 0 {
		return 0, 0, false
	}
	return sum / float64(n), n, n == len(t.columns)
}

// shortNames are the header labels of the benchmark's corruptions, as the
// TTA literature abbreviates them.
var shortNames = map[string]string{
	"gaussian_noise":    "Gauss.",
	"shot_noise":        "Shot",
	"impulse_noise":     "Impul.",
	"defocus_blur":      "Defoc.",
	"glass_blur":        "Glass",
	"motion_blur":       "Motion",
	"zoom_blur":         "Zoom",
	"snow":              "Snow",
	"frost":             "Frost",
	"fog":               "Fog",
	"brightness":        "Brit.",
	"contrast":          "Contr.",
	"elastic_transform": "Elastic",
	"pixelate":          "Pixel",
	"jpeg_compression":  "JPEG",
}

// groupName capitalizes a corruption group for a header.
func groupName(g corrupt.Group) string {
	switch g {
	case corrupt.Noise:
		return "Noise"
	case corrupt.Blur:
		return "Blur"
	case corrupt.Weather:
		return "Weather"
	case corrupt.Digital:
		return "Digital"
	}
	return g.String()
}

// tables arranges recs (later duplicates winning) into one table per
// severity of the corruption records, in increasing severity. Records of
// domains that are not corruptions join the table when there is at most
// one severity, and form a last table of their own otherwise. Columns are
// the corruptions that occur, in the benchmark's order, then corruptions
// unknown to the registry and other domains in first-appearance order.
func tables(recs []Record) []*table {
	recs = Latest(recs)
	var sevs []int
	hasOther := false
	for _, r := range recs {
		if r.Corruption == "" {
			hasOther = true
		} else if !slices.Contains(sevs, r.Severity) {
			sevs = append(sevs, r.Severity)
		}
	}
	slices.Sort(sevs)
	var out []*table
	bySeverity := make(map[int]*table)
	for _, s := range sevs {
		t := &table{severity: s, cells: make(map[string]map[string]float64)}
		if len(sevs) > 1 {
			t.title = "Severity " + strconv.Itoa(s)
		}
		bySeverity[s] = t
		out = append(out, t)
	}
	var other *table
	if hasOther {
		if len(out) == 1 {
			other = out[0]
		} else {
			other = &table{cells: make(map[string]map[string]float64)}
			if len(out) > 1 {
				other.title = "Other domains"
			}
			out = append(out, other)
		}
	}

	known := corrupt.Names()
	for _, t := range out {
		present := make(map[string]bool)
		var extra []column
		for _, r := range recs {
			var key string
			switch {
			case r.Corruption == "" && t == other:
				// Prefixed so that a domain cannot collide with a
				// corruption of the same name.
				key = "\x00" + r.Domain
			case r.Corruption != "" && bySeverity[r.Severity] == t:
				key = r.Corruption
			default:
				continue
			}
			if !present[key] {
				present[key] = true
				switch {
				case r.Corruption == "":
					extra = append(extra, column{key: key, label: r.Domain})
				case !slices.Contains(known, key):
					extra = append(extra, column{key: key, label: key})
				}
			}
			if !slices.Contains(t.methods, r.Method) {
				t.methods = append(t.methods, r.Method)
				t.cells[r.Method] = make(map[string]float64)
			}
			t.cells[r.Method][key] = r.Accuracy
		}
		for _, name := range known {
			if !present[name] {
				continue
			}
			c := column{key: name, label: shortNames[name]}
			if c.label == "" {
				c.label = name
			}
			if inf, err := corrupt.Lookup(name); err == nil {
				c.group = groupName(inf.Group)
			}
			t.columns = append(t.columns, c)
		}
		t.columns = append(t.columns, extra...)
	}
	return out
}
