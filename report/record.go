package report

import "time"

// Record is one finished evaluation of a method on a domain (a corruption
// at a severity): one line of an eval run's results.jsonl, appended as soon
// as the domain is done so that an interrupted run loses nothing finished.
type Record struct {
	Method     string  `json:"method"`
	Domain     string  `json:"domain"`     // "gaussian_noise/5", or a dataset name
	Corruption string  `json:"corruption"` // "gaussian_noise"; "" when the domain is not a corruption
	Severity   int     `json:"severity"`   // 1–5; 0 when the domain is not a corruption
	Samples    int     `json:"samples"`
	Correct    int     `json:"correct"`
	Accuracy   float64 `json:"accuracy"` // percent, 100·Correct/Samples

	Seconds         float64 `json:"seconds"`           // wall time of the domain
	ImagesPerSecond float64 `json:"images_per_second"` // Samples/Seconds
	Steps           int     `json:"steps"`             // optimizer steps taken
	Skipped         int     `json:"skipped"`           // steps skipped for non-finite gradients

	// Per-batch diagnostics, for the plots (empty for methods and models
	// that do not produce them):
	// PrincipalCosines holds, per batch, the cosines of the principal
	// angles between the visual and the textual subspaces (descending);
	// SemanticConcentration and PredictedClassCosine the batch means of
	// ‖f·P_T‖²/‖f‖² and of cos(f, t_pred).
	PrincipalCosines      [][]float64 `json:"principal_cosines,omitempty"`
	SemanticConcentration []float64   `json:"semantic_concentration,omitempty"`
	PredictedClassCosine  []float64   `json:"predicted_class_cosine,omitempty"`
	// TrueClassCosine holds, per batch, the mean of cos(f, t_y), the
	// ground-truth class's; Cosines sums both cosines up over the domain's
	// images, split by correct and wrong predictions.
	TrueClassCosine []float64      `json:"true_class_cosine,omitempty"`
	Cosines         *CosineSummary `json:"cosines,omitempty"`
	// Batches counts the domain's batches; BatchSeconds is the mean time
	// per batch of each phase the method reports ("align" is SubTTA's
	// subspace step, the paper's t_Sub; "adapt" the adaptation step, its
	// t_TTA; "predict", "encode").
	Batches      int                `json:"batches,omitempty"`
	BatchSeconds map[string]float64 `json:"batch_seconds,omitempty"`

	// Options are the method options the run gave this method (by key,
	// as tta.Preset.Set takes them), empty for the preset as it is.
	Options map[string]string `json:"options,omitempty"`

	Finished time.Time `json:"finished"`
	// Build is the Environment.Build of the binary that computed the
	// record; empty in records written before it was kept.
	Build string `json:"build,omitempty"`
	// Run identifies the configuration and inputs that produced the record
	// (a digest of what eval calls the run's identity, restricted to the
	// inputs this domain used); a run refuses to resume records of another.
	// Empty in records written before it was kept.
	Run string `json:"run,omitempty"`
}

// CosineSummary are a domain's mean cosines between the prediction
// features and the text features of the predicted class (Predicted) and of
// the ground-truth class (True), over all its images and split by whether
// the prediction was correct (where the two agree) or wrong.
type CosineSummary struct {
	Correct          int     `json:"correct_images"`
	Wrong            int     `json:"wrong_images"`
	Predicted        float64 `json:"predicted"`
	True             float64 `json:"true"`
	CorrectPredicted float64 `json:"correct_predicted"`
	WrongPredicted   float64 `json:"wrong_predicted"`
	WrongTrue        float64 `json:"wrong_true"`
}

// Sums returns c with its means multiplied by the images they average
// over, so that summaries add up (Means undoes it).
func (c CosineSummary) Sums() CosineSummary {
	n := float64(c.Correct + c.Wrong)
	c.Predicted *= n
	c.True *= n
	c.CorrectPredicted *= float64(c.Correct)
	c.WrongPredicted *= float64(c.Wrong)
	c.WrongTrue *= float64(c.Wrong)
	return c
}

// Means returns c, whose cosines are sums over its images, with each sum
// divided by the images it covers; nil when it covers none.
func (c CosineSummary) Means() *CosineSummary {
	n := c.Correct + c.Wrong
	if n == 0 {
		return nil
	}
	c.Predicted /= float64(n)
	c.True /= float64(n)
	if c.Correct > 0 {
		c.CorrectPredicted /= float64(c.Correct)
	}
	if c.Wrong > 0 {
		c.WrongPredicted /= float64(c.Wrong)
		c.WrongTrue /= float64(c.Wrong)
	}
	return &c
}

// add adds the sums of o (Sums) to c.
func (c *CosineSummary) add(o CosineSummary) {
	c.Correct += o.Correct
	c.Wrong += o.Wrong
	c.Predicted += o.Predicted
	c.True += o.True
	c.CorrectPredicted += o.CorrectPredicted
	c.WrongPredicted += o.WrongPredicted
	c.WrongTrue += o.WrongTrue
}
