package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fakeCommands writes executable shell scripts, name → body, into a new
// folder and returns it, for PATH: stand-ins for sbatch, scontrol and
// subtta that record how they were called.
func fakeCommands(t *testing.T, scripts map[string]string) string {
	t.Helper()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	dir := t.TempDir()
	for name, body := range scripts {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/bash\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestSlurmArrayScriptRequeue runs eval-array.sbatch as Slurm would, with a
// stand-in subtta that checkpoints and exits 130 on SIGTERM (or finishes
// just then, exit 0) and a stand-in scontrol, and sends the script SIGTERM
// as --signal=B:TERM does: a requeued task exits 0, one whose requeue
// failed exits 1 saying why (so that the afterok merge does not run on an
// unfinished shard), and one that finished is not requeued.
func TestSlurmArrayScriptRequeue(t *testing.T) {
	script, err := filepath.Abs("../../scripts/slurm/eval-array.sbatch")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name            string
		subttaOnTerm    int // subtta's exit status on SIGTERM
		scontrolStatus  int
		wantStatus      int
		wantRequeue     bool
		wantStderr      string
		forbiddenStderr string
	}{
		{"requeued", 130, 0, 0, true, "", "failed"},
		{"requeue fails", 130, 1, 1, true, "scontrol requeue 8 failed (exit status 1): shard ", ""},
		{"finished first", 0, 0, 0, false, "", "failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := t.TempDir()
			bin := fakeCommands(t, map[string]string{
				"subtta": `trap 'echo "fake subtta: SIGTERM"; exit ` + strconv.Itoa(tc.subttaOnTerm) + `' TERM
echo "$@" > "$FAKE_STATE/subtta.args"
: > "$FAKE_STATE/started"
while :; do sleep 0.02; done
`,
				"scontrol": `echo "$@" >> "$FAKE_STATE/scontrol.log"
exit ` + strconv.Itoa(tc.scontrolStatus) + "\n",
			})
			results := filepath.Join(state, "results")
			cmd := exec.Command("bash", script, results, "--methods", "source")
			cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "SUBTTA="+filepath.Join(bin, "subtta"),
				"FAKE_STATE="+state, "SLURM_ARRAY_TASK_ID=3", "SLURM_ARRAY_JOB_ID=5", "SLURM_JOB_ID=8")
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			waitFor(t, 20*time.Second, "the stand-in subtta to start", func() bool {
				_, err := os.Stat(filepath.Join(state, "started"))
				return err == nil
			})
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			var runErr error
			select {
			case runErr = <-done:
			case <-time.After(20 * time.Second):
				cmd.Process.Kill()
				t.Fatalf("the script did not end after SIGTERM\n%s%s", stdout.String(), stderr.String())
			}
			status := 0
			var exit *exec.ExitError
			if errors.As(runErr, &exit) {
				status = exit.ExitCode()
			} else if runErr != nil {
				t.Fatal(runErr)
			}
			log := stdout.String() + stderr.String()
			if status != tc.wantStatus {
				t.Errorf("exit status %d, want %d\n%s", status, tc.wantStatus, log)
			}
			args, _ := os.ReadFile(filepath.Join(state, "subtta.args"))
			if want := "eval --quiet --shard-from-env --out " + filepath.Join(results, "shard-3") + " --methods source"; strings.TrimSpace(string(args)) != want {
				t.Errorf("subtta ran as %q, want %q", args, want)
			}
			requeued, _ := os.ReadFile(filepath.Join(state, "scontrol.log"))
			if got := strings.TrimSpace(string(requeued)); tc.wantRequeue != (got == "requeue 8") || !tc.wantRequeue && got != "" {
				t.Errorf("scontrol called as %q; want requeue 8: %v", got, tc.wantRequeue)
			}
			if tc.wantStderr != "" && !strings.Contains(stderr.String(), tc.wantStderr) {
				t.Errorf("stderr %q, want %q", stderr.String(), tc.wantStderr)
			}
			if tc.forbiddenStderr != "" && strings.Contains(log, tc.forbiddenStderr) {
				t.Errorf("the log says %q:\n%s", tc.forbiddenStderr, log)
			}
		})
	}
}

// fakeSbatch stands in for sbatch on a cluster that demands an account: a
// job without --account is refused, --test-only says when a job would
// start, and a submission prints the next job ID (101, 102, ...), but a
// submission whose command line holds $FAKE_SBATCH_REFUSE is refused after
// its --test-only passed. Every call goes to $FAKE_STATE/sbatch.log, every
// job queued to $FAKE_STATE/queued.log.
const fakeSbatch = `echo "$*" >> "$FAKE_STATE/sbatch.log"
test_only=0 account=0
for a in "$@"; do
	case $a in
	--test-only) test_only=1 ;;
	--account=*) account=1 ;;
	esac
done
if [ "$account" = 0 ]; then
	echo "sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified" >&2
	exit 1
fi
if [ "$test_only" = 1 ]; then
	echo "sbatch: Job 99 to start at 2030-01-01T00:00:00 using 1 processors on nodes n1 in partition cpu" >&2
	exit 0
fi
if [ -n "${FAKE_SBATCH_REFUSE:-}" ] && [[ "$*" == *"$FAKE_SBATCH_REFUSE"* ]]; then
	echo "sbatch: error: QOSMaxSubmitJobPerUserLimit" >&2
	exit 1
fi
n=$(( $(cat "$FAKE_STATE/next" 2>/dev/null || echo 100) + 1 ))
echo "$n" > "$FAKE_STATE/next"
echo "$*" >> "$FAKE_STATE/queued.log"
echo "$n"
`

// TestSlurmSubmitOptions runs submit.sh against fakeSbatch: SBATCH_OPTS
// goes to both jobs; an option only the array is given (SBATCH_ARRAY_OPTS)
// that the merge job needs too is refused before anything is queued; and a
// merge refused once the array is queued says how to recover.
func TestSlurmSubmitOptions(t *testing.T) {
	script, err := filepath.Abs("../../scripts/slurm/submit.sh")
	if err != nil {
		t.Fatal(err)
	}
	bin := fakeCommands(t, map[string]string{"sbatch": fakeSbatch})
	for _, tc := range []struct {
		name       string
		env        []string
		wantStatus int
		stdout     string
		stderr     []string
		queued     []string // the submissions made, in order: a regular expression each matches
	}{
		{"shared options", []string{"SBATCH_OPTS=--account=acct --partition=cpu", "SBATCH_ARRAY_OPTS=--time=10"}, 0,
			"array job 101 (4 shards, 2 at a time), merge job 102", nil,
			[]string{`^--parsable --account=acct --partition=cpu --time=10 --chdir=\S+ --array=0-3%2 \S+/eval-array.sbatch \S+ --methods source$`,
				`^--parsable --account=acct --partition=cpu\s+--chdir=\S+ --dependency=afterok:101 \S+/merge.sbatch \S+$`}},
		{"account only for the array", []string{"SBATCH_ARRAY_OPTS=--account=acct"}, 1, "",
			[]string{"sbatch refuses the merge job, nothing is queued", "SBATCH_OPTS", "Invalid account"}, nil},
		{"merge refused after the array is queued", []string{"SBATCH_OPTS=--account=acct", "FAKE_SBATCH_REFUSE=--dependency"}, 1, "",
			[]string{"array job 101 is queued, but sbatch refused its merge job", "--dependency=afterok:101 ", "scancel 101"},
			[]string{`^--parsable --account=acct\s+--chdir=\S+ --array=0-3%2 `}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := t.TempDir()
			results := filepath.Join(state, "results")
			cmd := exec.Command("bash", script, results, "--methods", "source")
			cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "FAKE_STATE="+state, "SHARDS=4", "THROTTLE=2",
				"SBATCH_OPTS=", "SBATCH_ARRAY_OPTS=", "SBATCH_MERGE_OPTS=")
			cmd.Env = append(cmd.Env, tc.env...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			status := 0
			if err := cmd.Run(); err != nil {
				var exit *exec.ExitError
				if !errors.As(err, &exit) {
					t.Fatal(err)
				}
				status = exit.ExitCode()
			}
			if status != tc.wantStatus || !strings.Contains(stdout.String(), tc.stdout) {
				t.Errorf("exit status %d, stdout %q; want %d and %q\nstderr %s", status, stdout.String(), tc.wantStatus, tc.stdout, stderr.String())
			}
			for _, s := range tc.stderr {
				if !strings.Contains(stderr.String(), s) {
					t.Errorf("stderr %q, want %q", stderr.String(), s)
				}
			}
			b, _ := os.ReadFile(filepath.Join(state, "queued.log"))
			var queued []string
			for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				if l != "" {
					queued = append(queued, l)
				}
			}
			if len(queued) != len(tc.queued) {
				t.Fatalf("%d jobs queued, want %d:\n%s", len(queued), len(tc.queued), b)
			}
			for i, want := range tc.queued {
				if !regexp.MustCompile(want).MatchString(queued[i]) {
					t.Errorf("job %d queued as %q, want it to hold %q", i, queued[i], want)
				}
			}
			calls, _ := os.ReadFile(filepath.Join(state, "sbatch.log"))
			if tc.wantStatus == 0 && !regexp.MustCompile(`^--test-only .*eval-array.sbatch .*\n--test-only .*merge.sbatch `).Match(calls) {
				t.Errorf("the jobs were not checked with --test-only before they were queued:\n%s", calls)
			}
		})
	}
}
