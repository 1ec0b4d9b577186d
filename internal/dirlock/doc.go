// Package dirlock gives one process at a time a folder to write in: an
// exclusive advisory lock on a file inside it, held until Unlock or the
// process's end (the operating system drops it then, so a killed process
// leaves no stale lock).
package dirlock
