// Package serve is an HTTP server for a CLIP classifier that adapts to each
// client's image stream while it serves (subtta serve).
//
// # Requests
//
//   - POST /v1/classify: one image, as the raw body with an image content
//     type (or application/octet-stream), or as the "image" part of a
//     multipart form. Optional parameters, in the query string or as form
//     fields: labels (comma-separated), template (repeatable; "{}" stands for
//     the label) and stream; a query string that does not parse, or a labels
//     list with an empty entry, is refused (400), never read in part. The
//     answer holds the label probabilities in label order, the logits, the
//     best label and the model's version.
//     Without stream the frozen (source) model answers at once. With stream,
//     the request waits for its stream's next batch: requests of one stream
//     are gathered until the method's batch size is reached or the oldest
//     has waited MaxWait, the method takes its adaptation step on that
//     batch, and every request gets its row of the step's prediction, the
//     same numbers `subtta eval` gives for the same batch. A stream request
//     may carry an Idempotency-Key header: sent again with the same key, it
//     gets its first answer (StreamAnswer.Replayed) and the stream does not
//     adapt on its image again (see Persistence).
//   - POST /v1/embed: image features (an image, as for classify) or text
//     features (a JSON body {"texts": [...]}); normalize=true L2-normalises.
//   - GET /v1/streams/{id}: images seen, batches, optimizer steps, the last
//     batch's losses and principal-angle cosines, requests waiting.
//     DELETE /v1/streams/{id} forgets the stream and its saved state; its
//     next request starts afresh from the source weights.
//   - GET (or HEAD) /healthz, and GET /metrics in the Prometheus text format.
//
// Every error is a JSON object {"error": "..."} with a 4xx or 5xx status; a
// panic in a handler or an adaptation step becomes a 500 and the server
// goes on.
//
// # One model, many streams
//
// A [tta.Method] owns the LayerNorm parameters of its model's vision tower:
// it writes them in place. The server keeps one model, whose weights all
// streams share, and one Method per stream built over it. Between steps the
// model holds the source LayerNorm values. An adaptation step takes the
// model's lock, copies the stream's LayerNorm values into the model, steps,
// copies them back out and restores the source values: one step at a time.
// A stream thus holds only its LayerNorm values (3,584 floats for the
// built-in model, about 40,000 for ViT-B/32) and its Method's own state:
// optimizer moments, SubTTA's EMA covariance, MINT's class sums.
//
// Frozen requests run on a second clip.Model that shares every weight
// matrix with the first but has LayerNorms of its own, at the source values
// and never written: they need no lock, and neither wait for a step nor see
// a stream's parameters.
//
// # Persistence
//
// With a state store (Config.StateDir or Config.StateStore: a folder, or a
// Redis database), a stream's state is written after every step, before its
// requests are answered, so an answered request's adaptation survives a
// crash. Beyond MaxStreams streams in memory, the least recently used idle
// one is dropped (its state is saved) and read back when it is used again;
// without a store, new streams are refused instead.
//
// Several servers may share a store (replicas behind a load balancer that
// hashes the stream id), and a server may hold a stream that another has
// stepped since. Each saved state carries a stamp (a random birth, a
// generation counting its saves); a save replaces the stored state only if
// it still carries the stamp the server read or last wrote: checked under
// an exclusive lock on the file's lock file in a folder, by WATCH and
// MULTI/EXEC in Redis. Otherwise the server drops its copy, reloads the
// state and steps the batch again (in a folder, under the lock) before
// answering it: no answered adaptation is overwritten.
//
// The saved state also keeps the answers to the stream's latest requests
// that carried an Idempotency-Key (Config.RecentAnswers of them), saved in
// the same compare-and-swap as the step they come from. A request whose key
// the stream has answered gets that answer without a step, also after a
// reload: a client that sends a request again after its server died (before
// its step, between its save and its answer, or after answering) has the
// stream adapt on its image exactly once.
//
// A stream steps only on its latest saved state, confirmed by the stamp in
// the store before the step: when the store cannot be read, the stream does
// not step (Config.Degraded: 503, or the frozen answer marked adapted:
// false). A save that fails after a step is tried again in the background;
// the stream is not evicted meanwhile, and Shutdown tries until its context
// ends (ErrUnsaved). A saved state carries CRC-32C checksums: a damaged one
// is refused and set aside, and DELETE keeps the copy for the operator.
// Without a store, streams live in memory only: their adaptation is lost
// when the server stops. DELETE leaves a tombstone, so that a state
// missing without one is known lost (refused unless Config.AllowLostState).
//
// Stream ids are folded to lower case: CAM1 and cam1 are one stream.
//
// The state is the stream's counters and its Method's whole state
// (tta.Method.MarshalBinary: LayerNorm values, optimizer moments and step counts,
// SubTTA's EMA covariance and bank, MINT's class sums, TDA's caches), so a
// stream read back continues exactly as if it had never left memory.
//
// # Access
//
// With Config.AuthKeysFile, a request needs Authorization: Bearer KEY with
// a key of the file (401 with WWW-Authenticate without one); /healthz stays
// open, and /metrics takes the keys of Config.MetricsKeysFile when there is
// one. A key is compared by its SHA-256 digest, in constant time, and never
// written to a log, a metric or an answer. A stream belongs to the key that
// created it: its state file records the key's digest (Owner), so that the
// ownership survives restarts and holds on every server sharing the state
// directory, and any other key gets 404 for the stream, as for one that
// does not exist. Server.Reload reads the key files and the TLS
// certificate again (subtta serve calls it on SIGHUP); TLSConfig serves
// TLS 1.2 or later with the certificate last loaded.
//
// Config.KeyMaxInFlight and Config.KeyImagesPerSecond limit each key's
// requests at once and images per second (429 with Retry-After), so that
// one client cannot starve the others. Config.Guard resets a stream whose
// adaptation degenerates (a loss or the prediction entropy beyond a bound
// for several batches in a row, or one label taking most predictions) to
// the source weights: continual test-time adaptation is known to collapse
// on long streams, and a stream's images, whoever sends them, steer it.
//
// # Limits
//
// The request body (MaxBodyBytes, however it arrives: raw, multipart or
// JSON; a declared length beyond it is refused unread), the decoded image
// (MaxPixels, checked on the header with image.DecodeConfig before anything
// is decoded), labels and templates per request, concurrent requests
// (MaxConcurrent, at least the batch size; beyond it 429 with Retry-After)
// and the time a request may take (Timeout; 504). A client's string in an
// error comes back cut (ids to 64 characters, others to 200).
package serve
