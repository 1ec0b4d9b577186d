// Package prefetch reads the next batch of a sequence while the caller
// computes on the current one.
//
// A forward pass of the model (on the CPU or a GPU) and the decoding of
// the images it takes use different resources: a GPU computes while the
// host's cores decode, and on the CPU the decoding of a batch is spread
// over the cores in a burst that the pass does not wait for. Pipe runs a
// batch-reading function one batch ahead of its consumer, in order, and
// hands buffers back for reuse, so that at most two batches are alive at
// once: the one being computed on and the one being read. `subtta eval`
// (through tta/online's runner), `embed --images` and `classify --images`
// read their batches through a Pipe.
//
// Each spreads the items of one batch over goroutines: the reading inside
// a batch.
package prefetch
