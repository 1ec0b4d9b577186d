// Package filelock serialises the writers of one file across processes: an
// exclusive advisory lock on a lock file beside it, waited for, held while
// the file is read, checked and replaced, and dropped by the operating
// system if the process dies.
//
// The lock is taken on a lock file rather than on the file itself because
// the file is replaced by a rename (internal/atomicfile): a lock on it
// would stay with the old copy. A lock file is never removed: a process
// waiting on it, or holding it, would otherwise hold a lock on a file that
// others no longer open.
//
// On systems without flock (not unix) Acquire takes no lock: two processes
// are not kept apart there (Supported is false).
package filelock
