package serve

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// A stateStore keeps the saved states of streams, shared by every server
// that uses the same store: a folder (dirStore, the default) or a Redis
// database (redisStore). A save is a compare-and-swap on the stream's stamp,
// so that two servers never silently overwrite each other's saves.
type stateStore interface {
	// Load returns the stream's saved state, or nil when there is none;
	// a tombstone (streamHead.Deleted: the stream was deleted through the
	// API) is returned as it is. A state that is damaged (errBadState) is
	// set aside first, where no request reads it again, and the error
	// says so; where only such a state remains, Load says so too.
	Load(ctx context.Context, id string) (*savedStream, error)
	// Peek is Load without setting anything aside: it reads the state
	// whole and checks it as Load does, for GET /v1/streams/{id} of a
	// stream not in memory, which changes nothing in the store.
	Peek(ctx context.Context, id string) (*savedStream, error)
	// Head returns the head of the stream's saved state (all but the
	// Method's state and the saved answers), or nil when there is none,
	// without reading the rest where the state is of the current format;
	// as Load, it returns a tombstone as it is, and errBadState where
	// only a damaged state set aside remains.
	Head(ctx context.Context, id string) (*streamHead, error)
	// Save stores sv as the stream sv.ID's state if the stored state
	// still carries the stamp prev (when prev is nil: if there is none, or
	// a tombstone), and returns errStale otherwise, storing nothing.
	Save(ctx context.Context, sv *savedStream, prev *stamp) error
	// Delete replaces the stream's state by a tombstone carrying its
	// stamp, if allow says so of its head, checked and replaced at once:
	// allow is given nil for a state proven damaged, whose owner cannot be
	// read. A damaged state is kept set aside, for the operator (one whose
	// head is damaged, not set aside yet, is set aside first: Delete reads
	// the head alone). An error reading the state (not proven damaged)
	// deletes nothing. deleted says whether there was something, and it
	// went.
	Delete(ctx context.Context, id string, allow func(*streamHead) bool) (deleted bool, err error)
	// Where names the state of stream id in messages: a file, or a key.
	Where(id string) string
	// Close releases the store's connections.
	Close() error
}

// notFileError is a store's error for a stream whose state's place holds
// something other than a saved state's bytes: a folder's ID.stream that is
// a directory, say. Unlike an I/O error it does not pass, and unlike a
// damaged state it cannot be set aside or replaced by a save or a DELETE:
// the stream is refused (500) until the operator removes it.
type notFileError struct {
	where string // the path
	kind  string // what it is: "a directory", ...
}

func (e *notFileError) Error() string {
	return fmt.Sprintf("serve: %s is %s, not a regular file: remove it", e.where, e.kind)
}

// permanent says whether a store's error about a stream's state is one
// that does not pass, whatever the store does: a damaged state
// (errBadState), or one that is not a file (notFileError). The stream is
// refused (500) until it is deleted or the operator mends it, where a
// store that cannot be read now gets 503.
func permanent(err error) bool {
	var nf *notFileError
	return errors.Is(err, errBadState) || errors.As(err, &nf)
}

// tombstone is the state a Delete leaves of a stream whose state carried
// the stamp was, owned by owner: a server that still holds the stream
// finds it deleted through the API, not lost.
func tombstone(id string, was stamp, owner string) *savedStream {
	return &savedStream{streamHead: streamHead{ID: id, Stamp: was, Owner: owner, Deleted: true, Saved: time.Now().UTC()}}
}

// A streamLocker is a store that can keep every other server from saving a
// stream while this one reloads it and steps it again (dirStore, with its
// file lock). Saves of the stream by this store while the lock is held
// take it no second time. With a store that has none (redisStore), a
// server whose save is refused again reloads and steps again, up to
// maxResteps times.
type streamLocker interface {
	Lock(ctx context.Context, id string) (unlock func() error, err error)
}

// maxResteps bounds the reloads and second steps of one batch on a store
// without a lock: each refused save means that another server has saved
// the stream meanwhile, so the stream moves on; past the bound the batch's
// requests get 503 and are not adapted on.
const maxResteps = 8

// openStore opens the store named by Config: StateStore ("redis://..." or
// "rediss://...": a Redis database; anything else: a folder), else StateDir
// (a folder); nil when neither is set.
func openStore(ctx context.Context, c *Config) (stateStore, error) {
	where := c.StateStore
	if where == "" {
		where = c.StateDir
	} else if c.StateDir != "" && c.StateDir != c.StateStore {
		return nil, fmt.Errorf("serve: Config.StateDir %q and Config.StateStore %q: give one", c.StateDir, c.StateStore)
	}
	if err := CheckStateStore(where); err != nil {
		return nil, fmt.Errorf("serve: state store %w", err)
	}
	switch {
	case where == "":
		return nil, nil
	case isRedisURL(where):
		return openRedisStore(ctx, where, c.Logger)
	}
	return openDirStore(where)
}

// isRedisURL says whether a state store names a Redis database.
func isRedisURL(where string) bool {
	return strings.HasPrefix(where, "redis://") || strings.HasPrefix(where, "rediss://")
}

// CheckStateStore checks, without opening it or connecting to it, that
// where names a state store (Config.StateStore): a folder, or a Redis URL
// that parses; "" (none) passes. A command checks its flag with it before
// loading a model, so that a value that can never work is refused as the
// value it is, not found late as a failure to open. The error starts with
// the value quoted, and never shows a password it may hold.
func CheckStateStore(where string) error {
	switch {
	case isRedisURL(where):
		if _, err := redis.ParseURL(where); err != nil {
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err // url.Error quotes the whole URL, password and all
			}
			return fmt.Errorf("%s: %v", shownStore(where), err)
		}
	case strings.Contains(where, "://"):
		return fmt.Errorf("%s: want a folder, or redis://host:port/db (rediss:// for TLS)", shownStore(where))
	}
	return nil
}

// shownStore is a state store's name as a message may show it, quoted: a
// folder as it is, a URL with its password replaced by "xxxxx", and a URL
// that does not parse, which might hold a password anywhere, by its
// scheme alone.
func shownStore(where string) string {
	scheme, _, isURL := strings.Cut(where, "://")
	if !isURL {
		return quote(where, maxEcho)
	}
	u, err := url.Parse(where)
	if err != nil {
		return quote(scheme+"://…", maxEcho)
	}
	return quote(u.Redacted(), maxEcho)
}

// sameStamp says whether a stored state cur (nil: none) is the one a
// server read or last wrote, prev (nil: none).
func sameStamp(cur, prev *stamp) bool {
	if cur == nil || prev == nil {
		return cur == nil && prev == nil
	}
	return *cur == *prev
}
