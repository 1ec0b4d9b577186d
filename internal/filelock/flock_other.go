//go:build !unix

package filelock

import "os"

// Supported says whether Acquire keeps processes apart on this system.
const Supported = false

func lockFile(*os.File) error   { return nil }
func unlockFile(*os.File) error { return nil }
