// Package report turns the results of an evaluation run into the paper's
// outputs.
//
// An eval run appends one Record per finished (method, domain) to a JSON
// Lines file with AppendRecord, so that an interrupted run keeps everything
// it finished and a resumed run can skip it (ReadRecordsFile, Latest). From
// the records the package writes:
//
//   - Markdown: the paper's table, methods as rows and the corruptions as
//     columns in the benchmark's order, grouped Noise, Blur, Weather and
//     Digital, followed by the mean accuracy;
//   - CSV: the records in long format, one row each, for analysis elsewhere;
//   - WriteJSON: a Summary of the run with its configuration, timings and
//     per-method means, without the bulky per-batch diagnostics;
//   - Plots: PNG figures of the accuracies and of the diagnostics (principal
//     angles between the visual and textual subspaces, semantic
//     concentration), drawn with gonum.org/v1/plot.
//
// When the same (method, domain) was recorded more than once, as happens
// when a domain is rerun, the later record wins everywhere except in CSV,
// which writes the records as given.
//
// CompareSeeds arranges the records of several seeds of one run as the
// same tables with each cell, each mean and each method's difference to
// source as mean ± sample standard deviation over the seeds (Comparison:
// Markdown, CSV, JSON, Plots).
//
// TrainingPlot, apart from the evaluation outputs, draws the accuracy per
// epoch of a training run (`subtta train`).
package report
