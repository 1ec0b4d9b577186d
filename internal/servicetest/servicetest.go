//go:build unix

package servicetest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Missing stops the test because what is named is not at hand: a failure
// under CI, a skip elsewhere.
func Missing(tb testing.TB, format string, a ...any) {
	tb.Helper()
	msg := fmt.Sprintf(format, a...)
	if os.Getenv("CI") == "true" {
		tb.Fatalf("under CI: %s", msg)
	}
	tb.Skip(msg)
}

// Program returns the path of the program name, looked up in PATH and in
// /usr/sbin and /sbin (where Debian puts haproxy), or stops the test
// (Missing), naming the Debian package that has it.
func Program(tb testing.TB, name, debianPackage string) string {
	tb.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, dir := range []string{"/usr/sbin", "/sbin", "/usr/local/sbin"} {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	Missing(tb, "%s not found (apt-get install %s to run this test)", name, debianPackage)
	return ""
}

// FreeAddr returns a loopback address with a port free at the time of the
// call.
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// Process is a program started by Start.
type Process struct {
	Name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	log  *tail
}

// Start starts the program with args (and env added to this process's
// environment) in a process group of its own, its output kept for Log. It
// is killed (SIGKILL to its process group, by its process id) when the
// test ends, if it is still running.
func Start(tb testing.TB, name, program string, args, env []string) *Process {
	tb.Helper()
	cmd := exec.Command(program, args...)
	cmd.Env = append(os.Environ(), env...)
	// A process group of its own, so that Kill ends the workers a
	// program forks too (nginx's), which would otherwise live on and
	// hold its output open.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 5 * time.Second
	p := &Process{Name: name, cmd: cmd, done: make(chan struct{}), log: &tail{}}
	cmd.Stdout, cmd.Stderr = p.log, p.log
	if err := cmd.Start(); err != nil {
		tb.Fatalf("starting %s: %v", name, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	tb.Cleanup(p.Kill)
	return p
}

// Pid is the process's id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Kill ends the process and its process group at once (SIGKILL) and
// waits for it.
func (p *Process) Kill() {
	if !p.Exited() {
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	}
	<-p.done
}

// Stop sends SIGTERM and waits for the process to end, up to timeout
// (then kills it); it returns the process's error.
func (p *Process) Stop(timeout time.Duration) error {
	if !p.Exited() {
		syscall.Kill(p.cmd.Process.Pid, syscall.SIGTERM)
	}
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		p.Kill()
		return fmt.Errorf("%s did not stop within %v of SIGTERM", p.Name, timeout)
	}
}

// Exited says whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Done is closed when the process has ended; Err is then its exit.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err is the process's exit (cmd.Wait's error) once Done is closed.
func (p *Process) Err() error {
	<-p.done
	return p.err
}

// Log is the end of the process's output.
func (p *Process) Log() string { return p.log.String() }

// WaitTCP waits until addr accepts connections, or fails the test after
// timeout (at once if the process ended), with the end of its output.
func (p *Process) WaitTCP(tb testing.TB, addr string, timeout time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		if p.Exited() || time.Now().After(deadline) {
			tb.Fatalf("%s does not listen on %s (%v; exited: %v):\n%s", p.Name, addr, err, p.Exited(), p.Log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Redis starts Debian's redis-server on a free loopback port, keeping
// nothing on disk, and returns its URL, redis://127.0.0.1:PORT/0.
func Redis(tb testing.TB) (url string, p *Process) {
	tb.Helper()
	addr := FreeAddr(tb)
	p = RedisAt(tb, addr, tb.TempDir(), "")
	return "redis://" + addr + "/0", p
}

// RedisAt starts Debian's redis-server on addr (a loopback address) with
// its files in dir. With fsync "everysec" (as the serving docs ask) or
// "always", it keeps its data there in an append-only file synced that
// often, so that a server started again on dir has it back; with "", it
// keeps nothing.
func RedisAt(tb testing.TB, addr, dir, fsync string) *Process {
	tb.Helper()
	prog := Program(tb, "redis-server", "redis-server")
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		tb.Fatal(err)
	}
	args := []string{"--port", port, "--bind", host, "--dir", dir, "--loglevel", "warning", "--save", ""}
	if fsync != "" {
		args = append(args, "--appendonly", "yes", "--appendfsync", fsync)
	} else {
		args = append(args, "--appendonly", "no")
	}
	p := Start(tb, "redis-server", prog, args, nil)
	p.WaitTCP(tb, addr, 30*time.Second)
	// A server reading its data back answers -LOADING for a while.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		err := ping(addr)
		if err == nil {
			return p
		}
		if !strings.Contains(err.Error(), "LOADING") || time.Now().After(deadline) {
			tb.Fatalf("redis-server on %s: %v\n%s", addr, err, p.Log())
		}
	}
}

// ping sends Redis's PING and wants +PONG.
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "PING\r\n"); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(line) != "+PONG" {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

// tail keeps the last 64 KiB written to it.
type tail struct {
	mu sync.Mutex
	b  []byte
}

const tailBytes = 64 << 10

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > tailBytes {
		t.b = append(t.b[:0], t.b[len(t.b)-tailBytes:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
