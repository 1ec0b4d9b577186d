package eval

import (
	"cmp"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/subtta/subtta/tta"
)

// ErrBadShard: a shard is not written I/N with 0 ≤ I < N.
var ErrBadShard = errors.New("eval: bad shard")

// A Shard is one of Count parts of a run, numbered from 0. A run with a
// Shard computes only the units SplitShards gives that part, into a
// results folder of its own; Merge joins the parts' folders into the
// folder one process would have written.
type Shard struct {
	Index int `json:"index"`
	Count int `json:"count"`
}

// ParseShard reads a shard written "I/N", I from 0 to N−1.
func ParseShard(s string) (Shard, error) {
	i, n, ok := strings.Cut(s, "/")
	if !ok {
		return Shard{}, fmt.Errorf("%w %q: want I/N, I from 0 to N-1", ErrBadShard, s)
	}
	index, err1 := strconv.Atoi(strings.TrimSpace(i))
	count, err2 := strconv.Atoi(strings.TrimSpace(n))
	if err1 != nil || err2 != nil {
		return Shard{}, fmt.Errorf("%w %q: want I/N with integers, I from 0 to N-1", ErrBadShard, s)
	}
	sh := Shard{index, count}
	return sh, sh.check()
}

func (s Shard) String() string { return fmt.Sprintf("%d/%d", s.Index, s.Count) }

func (s Shard) check() error {
	if s.Count < 1 || s.Index < 0 || s.Index >= s.Count {
		return fmt.Errorf("%w %s: want I/N, I from 0 to N-1", ErrBadShard, s)
	}
	return nil
}

// A Unit is one method on one domain: the unit of work of a run and one
// record of results.jsonl.
type Unit struct {
	Method, Domain string
}

func (u Unit) String() string { return u.Method + " on " + u.Domain }

// A ShardPart is what one shard of a run computes: its units, in the order
// one process computes them, and their expected cost (tta.Preset.Cost).
type ShardPart struct {
	Units []Unit
	// Chains counts the groups of units that run together: a method whose
	// state carries from one domain to the next is one chain of all its
	// domains, any other unit a chain of its own.
	Chains int
	// Cost is the sum of the units' tta.Preset.Cost, in forward passes of the
	// vision tower per image of a domain.
	Cost float64
}

// A chain is units that one process computes in order.
type chain struct {
	method int // index in Config.Methods
	first  int // index of its first domain
	units  []Unit
	cost   float64
}

// SplitShards splits the (method, domain) units of cfg over n shards. A
// method whose state carries from one domain to the next (Config.carries)
// stays whole in one shard, so that every shard's numbers are those of one
// process running the whole configuration. The split depends only on the
// methods, corruptions, severities, protocol, dataset and views of cfg, not
// on its data: every shard computes the same split. Chains go, most costly
// first, to the shard with the least cost so far (the lowest index on a
// tie), which keeps the most loaded shard within one chain of the mean.
func SplitShards(cfg Config, n int) ([]ShardPart, error) {
	if n < 1 {
		return nil, fmt.Errorf("%w: %d shards, want at least 1", ErrBadShard, n)
	}
	cfg.Shard = nil
	cfg, err := cfg.planDefaults()
	if err != nil {
		return nil, err
	}
	domains := planDomains(cfg)
	var chains []chain
	for mi, m := range cfg.Methods {
		p, err := cfg.preset(m)
		if err != nil {
			return nil, err
		}
		w := p.Cost()
		if cfg.carries(p) {
			c := chain{method: mi}
			for _, d := range domains {
				c.units = append(c.units, Unit{m, d.name})
			}
			c.cost = w * float64(len(domains))
			chains = append(chains, c)
			continue
		}
		for di, d := range domains {
			chains = append(chains, chain{method: mi, first: di, units: []Unit{{m, d.name}}, cost: w})
		}
	}
	// Most costly first; equal costs in run order, so that the split is a
	// function of the configuration alone.
	slices.SortStableFunc(chains, func(a, b chain) int { return cmp.Compare(b.cost, a.cost) })
	parts := make([]ShardPart, n)
	owner := map[Unit]int{}
	for _, c := range chains {
		best := 0
		for i := range parts {
			if parts[i].Cost < parts[best].Cost {
				best = i
			}
		}
		parts[best].Cost += c.cost
		parts[best].Chains++
		for _, u := range c.units {
			owner[u] = best
		}
	}
	// Each shard's units in run order: method by method, domains in
	// stream order.
	for _, m := range cfg.Methods {
		for _, d := range domains {
			u := Unit{m, d.name}
			parts[owner[u]].Units = append(parts[owner[u]].Units, u)
		}
	}
	return parts, nil
}

// planDefaults is withDefaults as far as the split needs it: it does not
// ask for a model or data.
func (c Config) planDefaults() (Config, error) {
	if c.Model == "" {
		c.Model = "-"
	}
	if c.Data == "" {
		c.Data = "-"
	}
	return c.withDefaults()
}

// runUnits lists every unit of cfg (defaults filled in), in run order.
func runUnits(cfg Config) []Unit {
	var out []Unit
	domains := planDomains(cfg)
	for _, m := range cfg.Methods {
		for _, d := range domains {
			out = append(out, Unit{m, d.name})
		}
	}
	return out
}

// carries reports whether a method with preset p carries state from one
// domain to the next under c's protocol: always in the continual and mixed
// streams, and under the reset and episodic protocols when its
// registration says it does (tta.Preset.Carries).
func (c Config) carries(p tta.Preset) bool {
	if proto, _ := protocol(c.Protocol); !perDomain(proto) {
		return true
	}
	return p.Carries()
}

// shardUnits returns the units the configuration's shard computes, or nil
// when it is not a shard.
func shardUnits(cfg Config) (map[Unit]bool, error) {
	if cfg.Shard == nil {
		return nil, nil
	}
	parts, err := SplitShards(cfg, cfg.Shard.Count)
	if err != nil {
		return nil, err
	}
	mine := map[Unit]bool{}
	for _, u := range parts[cfg.Shard.Index].Units {
		mine[u] = true
	}
	return mine, nil
}

// ErrShardFolder: the results folder of a run holds the results of a
// shard that is not this run's: another shard of the run, or, for a run
// without a shard, any shard. It is bad usage (another --out, or the
// folder's shard, is meant).
var ErrShardFolder = errors.New("eval: the results folder of another shard")

// shardFolderError is an error that matches ErrShardFolder.
type shardFolderError string

func (e shardFolderError) Error() string        { return string(e) }
func (e shardFolderError) Is(target error) bool { return target == ErrShardFolder }

// checkShardFolder refuses a results folder that holds results of a shard
// other than the run's: its run.json names a shard, and not this one. A
// run without a shard does not complete a shard's folder either: it would
// make the folder a run of its own, which Merge refuses (to keep a shard's
// records for a run of the whole, copy its results.jsonl into the whole
// run's folder: the records carry their run's digest). A folder of a whole
// run can be sharded into.
func checkShardFolder(cfg Config, stored storedRunFile, haveResults bool) error {
	if !haveResults || !stored.exists || stored.parseErr != nil {
		return nil // compareRunFile says what is wrong with a run.json
	}
	old := stored.runFile
	switch {
	case old.Config.Shard == nil && cfg.Shard != nil:
		// The whole run's records would stay beside the shard's, and eval
		// merge refuses a folder holding more than its shard.
		return shardFolderError(fmt.Sprintf("eval: %s holds a run of the whole, not a shard: give the shard %s a folder of its own (--out), which eval merge joins with the others",
			cfg.Out, cfg.Shard))
	case old.Config.Shard == nil:
		return nil
	case cfg.Shard == nil:
		return shardFolderError(fmt.Sprintf("eval: %s holds shard %s of a run, which a run without --shard would make a run of its own (one eval merge refuses): give --shard %s (or --shard-from-env, in its array task) to continue the shard, or another --out for a run of the whole (with a copy of %s there to keep the shard's records)",
			cfg.Out, old.Config.Shard, old.Config.Shard, filepath.Join(cfg.Out, ResultsFile)))
	case *old.Config.Shard != *cfg.Shard:
		return shardFolderError(fmt.Sprintf("eval: %s holds shard %s of the run, not shard %s: use the shard's own folder", cfg.Out, old.Config.Shard, cfg.Shard))
	}
	return nil
}

// checkCarried refuses to run a shard whose split assumed the wrong thing
// about a method: one that carries state from one domain to the next
// must have all its domains in one shard.
func checkCarried(cfg Config, p tta.Preset, m tta.Method) error {
	if cfg.Shard == nil {
		return nil
	}
	v, err := m.MarshalCarried()
	if err != nil {
		return fmt.Errorf("eval: %s: %w", p.Method, err)
	}
	if got, want := v != nil, cfg.carries(p); got && !want {
		return fmt.Errorf("eval: %s carries state from one domain to the next, but the shard split takes it for independent domains (its tta.Registration.Carries is wrong): run it without --shard", p.Method)
	}
	return nil
}

// ShardFromEnv returns the shard a batch system's array task names: Slurm's
// SLURM_ARRAY_TASK_ID with SLURM_ARRAY_TASK_COUNT, or without the count
// (Slurm before 21.08) SLURM_ARRAY_TASK_MIN and SLURM_ARRAY_TASK_MAX of an
// array numbered without gaps (a SLURM_ARRAY_TASK_STEP other than 1 is
// refused); or a Kubernetes Indexed Job's
// JOB_COMPLETION_INDEX, whose count (the Job's completions) count gives,
// since Kubernetes does not put it in the environment. getenv reads the
// environment.
func ShardFromEnv(getenv func(string) string, count int) (Shard, error) {
	atoi := func(name string) (int, error) {
		v, err := strconv.Atoi(strings.TrimSpace(getenv(name)))
		if err != nil {
			return 0, fmt.Errorf("%w: $%s is %q, not an integer", ErrBadShard, name, getenv(name))
		}
		return v, nil
	}
	var sh Shard
	switch {
	case getenv("SLURM_ARRAY_TASK_ID") != "":
		id, err := atoi("SLURM_ARRAY_TASK_ID")
		if err != nil {
			return sh, err
		}
		// A stepped array (--array=0-6:2) numbers its tasks with gaps:
		// neither MIN and MAX nor ID say which shard a task is.
		if step := getenv("SLURM_ARRAY_TASK_STEP"); step != "" {
			n, err := atoi("SLURM_ARRAY_TASK_STEP")
			if err != nil {
				return sh, err
			}
			if n != 1 {
				return sh, fmt.Errorf("%w: the Slurm array steps by %d ($SLURM_ARRAY_TASK_STEP is %d; $SLURM_ARRAY_TASK_MIN %q, $SLURM_ARRAY_TASK_MAX %q): submit it as --array=0-N without a step (a %% throttle is fine)",
					ErrBadShard, n, n, getenv("SLURM_ARRAY_TASK_MIN"), getenv("SLURM_ARRAY_TASK_MAX"))
			}
		}
		lo, hi := 0, 0
		switch {
		case getenv("SLURM_ARRAY_TASK_COUNT") != "" && getenv("SLURM_ARRAY_TASK_MIN") == "":
			n, err := atoi("SLURM_ARRAY_TASK_COUNT")
			if err != nil {
				return sh, err
			}
			hi = n - 1
		case getenv("SLURM_ARRAY_TASK_MIN") != "" && getenv("SLURM_ARRAY_TASK_MAX") != "":
			if lo, err = atoi("SLURM_ARRAY_TASK_MIN"); err != nil {
				return sh, err
			}
			if hi, err = atoi("SLURM_ARRAY_TASK_MAX"); err != nil {
				return sh, err
			}
			if getenv("SLURM_ARRAY_TASK_COUNT") != "" {
				n, err := atoi("SLURM_ARRAY_TASK_COUNT")
				if err != nil {
					return sh, err
				}
				if n != hi-lo+1 {
					return sh, fmt.Errorf("%w: the Slurm array %d-%d has %d tasks, not one per index: submit it as --array=0-N (a %% throttle is fine, a step is not)", ErrBadShard, lo, hi, n)
				}
			}
		default:
			return sh, fmt.Errorf("%w: $SLURM_ARRAY_TASK_ID is set but neither $SLURM_ARRAY_TASK_COUNT nor $SLURM_ARRAY_TASK_MIN and $SLURM_ARRAY_TASK_MAX", ErrBadShard)
		}
		sh = Shard{id - lo, hi - lo + 1}
		if count > 0 && count != sh.Count {
			return sh, fmt.Errorf("%w: the Slurm array has %d tasks, the shard count given is %d", ErrBadShard, sh.Count, count)
		}
	case getenv("JOB_COMPLETION_INDEX") != "":
		id, err := atoi("JOB_COMPLETION_INDEX")
		if err != nil {
			return sh, err
		}
		if count < 1 {
			return sh, fmt.Errorf("%w: $JOB_COMPLETION_INDEX is set, but not the shard count (the Job's completions)", ErrBadShard)
		}
		sh = Shard{id, count}
	default:
		return sh, fmt.Errorf("%w: neither $SLURM_ARRAY_TASK_ID nor $JOB_COMPLETION_INDEX is set", ErrBadShard)
	}
	return sh, sh.check()
}

// methodUnits counts the units of method in mine (all domains when mine
// is nil).
func methodUnits(mine map[Unit]bool, method string, domains []*domain) int {
	if mine == nil {
		return len(domains)
	}
	n := 0
	for _, d := range domains {
		if mine[Unit{method, d.name}] {
			n++
		}
	}
	return n
}
