// Package optim holds optimizers over named parameter vectors ([Param]):
// [Adam] (with Decoupled, AdamW) and [SGD], and [GradMean], a running mean
// of gradients. Package tta steps CLIP's visual LayerNorms with them at
// test time, package pretrain a whole CLIP in training.
//
// The updates follow torch.optim's single-tensor arithmetic in the element
// type T (float32 for models, float64 for reference checks): bias
// corrections and step sizes are float64 and rounded to T, and every
// elementwise operation is rounded in T, as torch does on float32 tensors.
// On the PyTorch fixtures, AdamW, Adam and L2-Adam steps agree to within
// one float32 ulp.
//
// A step with a NaN or ±Inf gradient is skipped and counted, as torch's
// GradScaler would skip it. An optimizer's state is kept per parameter as
// torch keeps it (a step count and buffers named as in its state_dict,
// [BufExpAvg] and so on), and can be copied out ([Optimizer].State),
// restored (SetState) and cleared (Reset), so that a checkpoint can resume
// a run exactly.
//
// [Config] chooses an optimizer and its settings before the element type
// is known, as a method's or a preset's configuration does; [New] builds
// it.
package optim
