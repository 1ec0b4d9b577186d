// Package online is the online test-time adaptation protocol: how a
// Method (package tta) meets a test stream. It holds the Domain a stream
// is read from, the protocols that move between domains (reset per
// domain, continual, mixed, episodic, and gradual severities), the Runner that cuts streams into batches and
// scores them, the one place where a stream is ordered (Python's
// random.shuffle with a seed, as the official code does, explicit order
// files, limits), and the text subspace the per-batch diagnostics are
// measured against. The Runner reads the next batch while the method
// steps on the current one, and computes a batch's diagnostics on worker
// goroutines while the method steps on the next ones; the records, in
// order, and their bits are those of a serial run.
//
// Run changes the model: a method that trains its visual LayerNorms
// (TENT, SubTTA, …) updates the model's LayerNorm parameters in place, and
// Run does not restore them at the end. After Run the model carries the
// adapted weights of the last domain; a method built from it later takes
// those as its "source" weights (they are copied at construction). Call
// the first method's Reset (which restores the weights it was built on)
// before building another, or build every method from a fresh model.
//
// The Runner keeps counts and diagnostics, not predictions: a BatchRecord
// holds a batch's size, its correct count and the method's diagnostics,
// and a Report the accuracies. To get each image's prediction (logits,
// Preds, features), call the Method's Step directly on the batches.
//
// Package eval builds on it for files, records, resume and checkpoints;
// it imports neither eval nor any model code.
package online
