#!/bin/bash
# Submits a subtta evaluation to Slurm as a job array of SHARDS shards
# (default 16), at most THROTTLE (default 8) running at once, and a merge
# job that runs once every shard succeeded. Extra sbatch options for the
# array (partition, account, time, CPUs) go in SBATCH_ARRAY_OPTS.
#
#   scripts/slurm/submit.sh RESULTS [subtta eval flags...]
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
# shellcheck disable=SC2086
array=$(sbatch --parsable ${SBATCH_ARRAY_OPTS:-} --chdir="$results" --array="0-$((shards - 1))%$throttle" \
	"$here/eval-array.sbatch" "$results" "$@")
array=${array%%;*}
merge=$(sbatch --parsable --chdir="$results" --dependency="afterok:$array" "$here/merge.sbatch" "$results")
merge=${merge%%;*}
echo "array job $array ($shards shards, $throttle at a time), merge job $merge; results in $results/merged"
