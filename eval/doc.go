// Package eval runs the paper's benchmark: a CLIP model adapted by one or
// more test-time adaptation methods over a corrupted image stream (the 15
// corruptions of CIFAR-10-C, CIFAR-100-C or ImageNet-C at some severities),
// one stream per corruption, and the table of accuracies it produces.
//
// Run takes a Config (read by ReadConfig from JSON or YAML with the same
// keys, or from a results folder's run.json; `subtta eval --config` takes
// such a run.json, or a YAML file of the command's flags) and:
//
//  1. loads the checkpoint and the tokenizer, and finds where the images
//     come from: the benchmark's files (CIFAR-C .npy, ImageNet-C folders)
//     or a clean test set to corrupt on the fly;
//  2. locks the results folder Out and reads what it already holds,
//     refusing a folder made with another configuration (see Resuming);
//  3. opens one domain per corruption and severity, corrupting a clean
//     test set's images on the fly (package data/corrupt, seeded per image)
//     when that is the source; every domain is streamed in the official
//     order (Python's random.shuffle with Seed, 1 in the official protocol)
//     and cut to Limit images;
//  4. for each method, builds its zero-shot head from its preset's prompt
//     templates (tta.Lookup) and streams the domains not yet done through
//     it with online.Runner, resetting before each domain (or continually,
//     mixed, episodically, or over gradual severities);
//  5. appends each finished domain to Out/results.jsonl at once (in the
//     continual and mixed protocols, at the end of the stream), with its
//     per-batch diagnostics, and every batch to Out/batches.jsonl;
//  6. writes results.md (the paper's layout: methods as rows, corruptions
//     grouped Noise/Blur/Weather/Digital, mean), results.csv, results.json
//     (configuration, timings, means) and, with Plot, PNG plots.
//
// # Resuming
//
// A run that stops (killed, Ctrl-C, an error) keeps every finished domain,
// and the domain in progress as of its last checkpoint: the method's whole
// state (tta.Method.MarshalBinary) after its latest batch, saved in Out/state at most
// every Options.CheckpointEvery and at once on cancellation. Run again with
// the same Out and configuration and only what is missing is computed; a folder holding results of another configuration (other model,
// data, limit, batch size, seeds or protocol) is refused rather than mixed.
// SubTTA's EMA covariance survives from one corruption to the next, as in the
// official code, so its state after every finished domain is saved in
// Out/state and restored on resume: a resumed run gives the same numbers as
// an uninterrupted one. The continual and mixed protocols are one stream
// through all domains: they are checkpointed likewise, in one file for the
// stream, and continue from it (the mixed stream's batch lines count each
// domain's images, online.BatchRecord.Domains). Every file Run writes in
// Out/state ends in a CRC-32C of its bytes: one that is damaged or cut short (or a
// checkpoint written before checksums) is removed with a warning on
// Options.Log, and what it held is computed again. A domain computed again
// replaces its record in results.jsonl, which holds each domain once. A
// record that eval cannot have written for the run (a field left out, a
// domain other than its corruption at its severity, counts that its
// stream cannot give) is refused, naming its line, as a damaged one is:
// it would be resumed, and shown, as a result it is not.
//
// A method whose outputs (features, logits) become NaN or infinite, an
// adaptation that diverged, stops the run at that batch, before its
// predictions are counted: the error names the stream, the batch and the
// options the run gave the method, and says what the folder keeps.
//
// # Shards
//
// A run splits over machines by its (method, domain) units: with
// Config.Shard, Run computes only the units SplitShards gives that shard,
// into a folder of its own, and Merge joins the shards' folders into the
// folder one process would have written. A method whose state carries
// from one domain to the next (its tta.Registration's Carries, and every
// method of the continual and mixed protocols) stays whole in one shard,
// so the merged records equal one process's but for their timings; shards
// are balanced by each registration's Cost. ShardFromEnv reads the shard of a Slurm array task or a
// Kubernetes Indexed Job pod.
//
// # Seeds
//
// A result moves with the stream order and the random views, both drawn
// from Config.Seed. CompareSeeds reads results folders back (ReadFolder)
// as the seeds of one run, refusing folders whose identity differs in
// anything else (ErrNotSeeds, naming the fields), and returns their table
// of mean ± standard deviation (report.CompareSeeds); WriteSeedReport
// writes it as Markdown, CSV, JSON and a plot.
package eval
