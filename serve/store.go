package serve

import (
	"context"
	"fmt"
	"strings"
)

// A stateStore keeps the saved states of streams, shared by every server
// that uses the same store: a folder (dirStore, the default) or a Redis
// database (redisStore). A save is a compare-and-swap on the stream's stamp,
// so that two servers never silently overwrite each other's saves.
type stateStore interface {
	// Load returns the stream's saved state, or nil when there is none.
	Load(ctx context.Context, id string) (*savedStream, error)
	// Head returns the head of the stream's saved state (all but the
	// Method's state and the saved answers), or nil when there is none,
	// without reading the rest where the state is of the current format.
	Head(ctx context.Context, id string) (*streamHead, error)
	// Save stores sv as the stream sv.ID's state if the stored state
	// still carries the stamp prev (when prev is nil: if there is none),
	// and returns errStale otherwise, storing nothing.
	Save(ctx context.Context, sv *savedStream, prev *stamp) error
	// Delete removes the stream's state if only, when not nil, says so of
	// it, checked and removed at once; a stream without one is no error.
	Delete(ctx context.Context, id string, only func(*streamHead) bool) error
	// Where names the state of stream id in messages: a file, or a key.
	Where(id string) string
	// Close releases the store's connections.
	Close() error
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
	switch {
	case where == "":
		return nil, nil
	case strings.HasPrefix(where, "redis://") || strings.HasPrefix(where, "rediss://"):
		return openRedisStore(ctx, where)
	case strings.Contains(where, "://"):
		return nil, fmt.Errorf("serve: state store %s: want a folder, or redis://host:port/db", quote(where, maxEcho))
	}
	return openDirStore(where)
}

// sameStamp says whether a stored state cur (nil: none) is the one a
// server read or last wrote, prev (nil: none).
func sameStamp(cur, prev *stamp) bool {
	if cur == nil || prev == nil {
		return cur == nil && prev == nil
	}
	return *cur == *prev
}
