package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// needEngine skips the test with a one-line reason, or fails it under CI
// (CI=true), where every engine the tests use must be there.
func needEngine(t *testing.T, format string, a ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("under CI: "+format, a...)
	}
	t.Skipf(format, a...)
}

// slurmCluster is a one-node Slurm cluster started by a test: munged,
// slurmctld and slurmd, each stopped by its PID when the test ends.
type slurmCluster struct {
	dir string
	env []string // SLURM_CONF for the client commands
}

// startSlurm starts munged, slurmctld and slurmd on this machine with a
// minimal configuration in a temporary folder, and waits for the node to
// be idle. It needs root (slurmd runs jobs as their user) and Debian's
// slurm-wlm and munge.
func startSlurm(t *testing.T) *slurmCluster {
	t.Helper()
	if os.Geteuid() != 0 {
		needEngine(t, "the Slurm test starts slurmd, which needs root")
	}
	for _, cmd := range []string{"munged", "mungekey", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel", "sinfo"} {
		if _, err := exec.LookPath(cmd); err != nil {
			needEngine(t, "%s not found: install Debian's slurm-wlm and munge to run the Slurm test", cmd)
		}
	}
	dir, err := os.MkdirTemp("", "subtta-slurm-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	for _, d := range []string{"munge", "state", "spool"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	c := &slurmCluster{dir: dir}
	key := filepath.Join(dir, "munge", "munge.key")
	if out, err := exec.Command("mungekey", "-c", "-k", key).CombinedOutput(); err != nil {
		t.Fatalf("mungekey: %v\n%s", err, out)
	}
	socket := filepath.Join(dir, "munge", "munge.socket")
	c.start(t, "munged", "-F", "-f", "--socket="+socket, "--key-file="+key,
		"--log-file="+filepath.Join(dir, "munged.log"), "--pid-file="+filepath.Join(dir, "munge", "munged.pid"),
		"--seed-file="+filepath.Join(dir, "munge", "seed"))
	waitFor(t, 10*time.Second, "munged's socket", func() bool { _, err := os.Stat(socket); return err == nil })

	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	host, _, _ = strings.Cut(host, ".")
	conf := filepath.Join(dir, "slurm.conf")
	err = os.WriteFile(conf, fmt.Appendf(nil, `ClusterName=subttatest
SlurmctldHost=%[1]s(127.0.0.1)
SlurmctldPort=%[3]d
SlurmdPort=%[4]d
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=%[2]s/munge/munge.socket
StateSaveLocation=%[2]s/state
SlurmdSpoolDir=%[2]s/spool
SlurmctldPidFile=%[2]s/slurmctld.pid
SlurmdPidFile=%[2]s/slurmd.pid
SlurmctldLogFile=%[2]s/slurmctld.log
SlurmdLogFile=%[2]s/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
JobRequeue=1
MinJobAge=600
KillWait=10
NodeName=%[1]s NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=test Nodes=%[1]s Default=YES MaxTime=INFINITE State=UP
`, host, dir, freePort(t), freePort(t)), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	c.env = append(os.Environ(), "SLURM_CONF="+conf)
	c.start(t, "slurmctld", "-D", "-i", "-f", conf)
	c.start(t, "slurmd", "-D", "-f", conf)
	waitFor(t, 60*time.Second, "the Slurm node to be idle", func() bool {
		out, _ := c.command("sinfo", "-h", "-o", "%t").Output()
		return strings.TrimSpace(string(out)) == "idle"
	})
	return c
}

// start runs a daemon in the foreground, its output in dir/NAME.out, and
// stops it by its PID (SIGTERM, then SIGKILL) when the test ends.
func (c *slurmCluster) start(t *testing.T, name string, args ...string) {
	t.Helper()
	out, err := os.Create(filepath.Join(c.dir, name+".out"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(name, args...)
	cmd.Env = c.env
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		out.Close()
	})
}

func (c *slurmCluster) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Env = c.env
	return cmd
}

// jobState is the state of a job (or array task) by scontrol.
func (c *slurmCluster) jobState(t *testing.T, id string) (state string, restarts int) {
	t.Helper()
	out, err := c.command("scontrol", "show", "job", "-o", id).CombinedOutput()
	if err != nil {
		t.Fatalf("scontrol show job %s: %v\n%s", id, err, out)
	}
	if m := regexp.MustCompile(`JobState=(\S+)`).FindSubmatch(out); m != nil {
		state = string(m[1])
	}
	if m := regexp.MustCompile(`Restarts=(\d+)`).FindSubmatch(out); m != nil {
		fmt.Sscan(string(m[1]), &restarts)
	}
	return state, restarts
}

// reason is why a job (or array task) is pending, by scontrol.
func (c *slurmCluster) reason(t *testing.T, id string) string {
	t.Helper()
	out, _ := c.command("scontrol", "show", "job", "-o", id).CombinedOutput()
	if m := regexp.MustCompile(`Reason=(\S+)`).FindSubmatch(out); m != nil {
		return string(m[1])
	}
	return ""
}

// logs returns the daemons' and the jobs' logs, for a failure message.
func (c *slurmCluster) logs(results string) string {
	var b strings.Builder
	files, _ := filepath.Glob(filepath.Join(results, "*.out"))
	for _, f := range append(files, filepath.Join(c.dir, "slurmctld.log"), filepath.Join(c.dir, "slurmd.log")) {
		data, _ := os.ReadFile(f)
		if len(data) > 4000 {
			data = data[len(data)-4000:]
		}
		fmt.Fprintf(&b, "==> %s <==\n%s\n", f, data)
	}
	return b.String()
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// waitFor polls ok until it holds, or fails the test after limit, with
// more (if not nil) saying why.
func waitFor(t *testing.T, limit time.Duration, what string, ok func() bool, more ...func() string) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !ok() {
		if time.Now().After(deadline) {
			msg := ""
			for _, f := range more {
				msg += "\n" + f()
			}
			t.Fatalf("waited %v for %s%s", limit, what, msg)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// perProcessFields are the fields of a results.jsonl record that measure
// the process that computed it, not the result: its wall time, its rate,
// its time per batch phase and when it finished. Every other field must be
// the same bits whether a record comes from a shard or from one process.
var perProcessFields = []string{"seconds", "images_per_second", "batch_seconds", "finished"}

// readResultLines returns the records of a results.jsonl without the
// per-process fields, each as canonical JSON (numbers as written).
func readResultLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.UseNumber()
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		for _, f := range perProcessFields {
			if _, ok := m[f]; !ok {
				t.Fatalf("%s: a record without %q", path, f)
			}
			delete(m, f)
		}
		c, _ := json.Marshal(m) // sorted keys
		out = append(out, string(c))
	}
	return out
}

// TestSlurmArrayEqualsOneProcess submits a small built-in-model evaluation
// (reset baselines, TDA, and the carried-state chains of SubTTA-M and
// RoTTA) to a one-node Slurm cluster with scripts/slurm/submit.sh: an array
// of 4 shards, 2 at a time, and the merge job that depends on it. One
// task is sent SIGTERM mid-run, as --signal=B:TERM does before a time
// limit: it checkpoints, requeues and resumes. The merged results.jsonl
// must equal that of the same run in one process, record for record, every
// field but the per-process ones (perProcessFields) the same bits.
func TestSlurmArrayEqualsOneProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the Slurm test starts a cluster and runs an evaluation")
	}
	t0 := time.Now()
	c := startSlurm(t)
	dir := c.dir
	t.Logf("%s: Slurm up", time.Since(t0).Round(time.Second))
	bin := filepath.Join(dir, "subtta")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	script, err := filepath.Abs("../../scripts/slurm/submit.sh")
	if err != nil {
		t.Fatal(err)
	}
	env := append(c.env, "SUBTTA="+bin, "SUBTTA_CACHE="+filepath.Join(dir, "cache"), "SHARDS=4", "THROTTLE=2",
		"SBATCH_ARRAY_OPTS=--cpus-per-task=1 --time=10") // the script asks for 16 CPUs; this node has 2
	flags := []string{"--methods", "source,tent,subtta-m,rotta,tda", "--corruptions", "gaussian_noise,frost,contrast",
		"--limit", "96", "--batch-size", "8"}

	single := exec.Command(bin, append([]string{"eval", "--quiet", "--out", filepath.Join(dir, "single")}, flags...)...)
	single.Env = env
	if out, err := single.CombinedOutput(); err != nil {
		t.Fatalf("single-process run: %v\n%s", err, out)
	}

	t.Logf("%s: single-process run done", time.Since(t0).Round(time.Second))
	results := filepath.Join(dir, "results")
	submit := exec.Command(script, append([]string{results}, flags...)...)
	submit.Env = env
	out, err := submit.CombinedOutput()
	if err != nil {
		t.Fatalf("submit.sh: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`array job (\d+) .* merge job (\d+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("submit.sh said %q", out)
	}
	array, merge := string(m[1]), string(m[2])

	// SIGTERM to the batch shell of the task that runs the SubTTA-M chain,
	// once it has stored a few batches.
	var chain string
	waitFor(t, 90*time.Second, "a task to start the SubTTA-M chain", func() bool {
		for i := range 4 {
			b, _ := os.ReadFile(filepath.Join(results, fmt.Sprintf("shard-%d", i), "batches.jsonl"))
			if bytes.Count(b, []byte(`"method":"subtta-m"`)) >= 2 {
				chain = fmt.Sprintf("%s_%d", array, i)
				return true
			}
		}
		return false
	}, func() string { return c.logs(results) })
	t.Logf("%s: SIGTERM to task %s", time.Since(t0).Round(time.Second), chain)
	// scancel retries for minutes when the task is in transition (being
	// requeued) after the signal went through: it runs on its own while
	// the task's log shows that the signal arrived.
	sc := c.command("scancel", "--batch", "--signal=TERM", chain)
	if err := sc.Start(); err != nil {
		t.Fatal(err)
	}
	scDone := make(chan struct{})
	go func() { sc.Wait(); close(scDone) }()
	taskLog := filepath.Join(results, "subtta-eval-"+chain+".out")
	waitFor(t, 60*time.Second, "task "+chain+" to take SIGTERM", func() bool {
		b, _ := os.ReadFile(taskLog)
		return bytes.Contains(b, []byte("SIGTERM: checkpointing and requeueing"))
	}, func() string { return c.logs(results) })
	// Once: scancel would signal the requeued task again.
	select {
	case <-scDone:
	default:
		sc.Process.Kill()
		<-scDone
	}
	deadline := time.Now().Add(150 * time.Second)
	for {
		state, _ := c.jobState(t, merge)
		if state == "COMPLETED" {
			break
		}
		if state != "PENDING" && state != "RUNNING" || time.Now().After(deadline) {
			t.Fatalf("merge job %s: %s\n%s", merge, state, c.logs(results))
		}
		// Slurm holds a requeued job back for minutes (its BeginTime); a
		// test need not wait for that.
		if st, _ := c.jobState(t, chain); st == "PENDING" && c.reason(t, chain) == "BeginTime" {
			c.command("scontrol", "update", "JobId="+chain, "StartTime=now").Run()
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("%s: merge job done", time.Since(t0).Round(time.Second))
	if _, restarts := c.jobState(t, chain); restarts != 1 {
		t.Errorf("task %s restarted %d times, want 1 (requeued once after SIGTERM)\n%s", chain, restarts, c.logs(results))
	}
	if b, _ := os.ReadFile(taskLog); !bytes.Contains(b, []byte("continuing after batch")) {
		t.Errorf("task %s did not continue from its checkpoint:\n%s", chain, b)
	}

	want := readResultLines(t, filepath.Join(dir, "single", "results.jsonl"))
	got := readResultLines(t, filepath.Join(results, "merged", "results.jsonl"))
	if len(want) != 15 || len(got) != len(want) {
		t.Fatalf("merged %d records, the single run %d, want 15 (5 methods × 3 corruptions)", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("record %d:\nmerged %s\nsingle %s", i, got[i], want[i])
		}
	}
}
