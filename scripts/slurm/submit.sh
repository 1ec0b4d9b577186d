#!/bin/bash
# Submits a subtta evaluation to Slurm as a job array of SHARDS shards
# (default 16), at most THROTTLE (default 8) running at once, and a merge
# job that runs once every shard succeeded.
#
#   scripts/slurm/submit.sh RESULTS [subtta eval flags...]
#
# Extra sbatch options: SBATCH_OPTS for both jobs (--account, --partition,
# --qos: what every job of yours needs), SBATCH_ARRAY_OPTS for the array
# alone (--time, --cpus-per-task, --mem: what a shard needs) and
# SBATCH_MERGE_OPTS for the merge job alone. Both jobs are first checked
# with sbatch --test-only, so that an option one of them lacks is refused
# before anything is queued.
#
# RESULTS must be on storage every node sees. subtta is $SUBTTA or the one
# on PATH; the eval flags are those of a single-process run (--shard is
# set per task). Rerunning the same command after a failure recomputes only
# what is missing: every shard resumes its folder.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
results=${1:?usage: submit.sh RESULTS [subtta eval flags...]}
shift
shards=${SHARDS:-16}
throttle=${THROTTLE:-8}
mkdir -p "$results"
results=$(cd "$results" && pwd)
array_opts="${SBATCH_OPTS:-} ${SBATCH_ARRAY_OPTS:-}"
merge_opts="${SBATCH_OPTS:-} ${SBATCH_MERGE_OPTS:-}"
range="0-$((shards - 1))%$throttle"

# Both jobs checked before either is queued: an array queued without its
# merge would be queued a second time by the next try.
# shellcheck disable=SC2086 # the options split into words
if ! out=$(sbatch --test-only $array_opts --chdir="$results" --array="$range" "$here/eval-array.sbatch" "$results" "$@" 2>&1); then
	echo "submit.sh: sbatch refuses the array job, nothing is queued:" >&2
	echo "$out" >&2
	exit 1
fi
# shellcheck disable=SC2086
if ! out=$(sbatch --test-only $merge_opts --chdir="$results" "$here/merge.sbatch" "$results" 2>&1); then
	echo "submit.sh: sbatch refuses the merge job, nothing is queued (options both jobs need, such as --account or --partition, go in SBATCH_OPTS; SBATCH_ARRAY_OPTS is the array's alone):" >&2
	echo "$out" >&2
	exit 1
fi

# shellcheck disable=SC2086
array=$(sbatch --parsable $array_opts --chdir="$results" --array="$range" "$here/eval-array.sbatch" "$results" "$@")
array=${array%%;*}
# shellcheck disable=SC2086
if ! merge=$(sbatch --parsable $merge_opts --chdir="$results" --dependency="afterok:$array" "$here/merge.sbatch" "$results"); then
	echo "submit.sh: array job $array is queued, but sbatch refused its merge job (above). Queue the merge by hand, once its cause is fixed:" >&2
	echo "  sbatch $merge_opts --chdir=$results --dependency=afterok:$array $here/merge.sbatch $results" >&2
	echo "or cancel the array (scancel $array) before running submit.sh again, which would queue a second array." >&2
	exit 1
fi
merge=${merge%%;*}
echo "array job $array ($shards shards, $throttle at a time), merge job $merge; results in $results/merged"
