#!/usr/bin/env bash
# The whole suite with every core busy (issue 47): proof that no test waits on a fixed wall time
# a loaded machine outruns. One CPU burner per core (a shell busy loop at normal priority, so the
# suite's processes get about half of each core), killed on exit by a trap, whatever ends the run.
#
#   tests/stress.sh                  # the whole suite once, as CI runs it (pyproject's addopts)
#   tests/stress.sh --runs 3         # three runs in a row, stopping at the first failure
#   tests/stress.sh --burners 4 -- tests/e2e -n 2    # 4 burners; pytest arguments after --
#
# Prints each run's result and wall time, and a last line `stress: N/M passed ...`; exits non-zero
# if any run failed. For people and sessions, not for CI: it takes the machine for the whole run.
set -uo pipefail
cd "$(dirname "$0")/.."

runs=1
burners=$(nproc)
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs="$2"; shift 2 ;;
    --burners) burners="$2"; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) break ;;
  esac
done

pids=()
stop_burners() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null; done
  pids=()
}
trap stop_burners EXIT
trap 'stop_burners; exit 130' INT TERM

for _ in $(seq "$burners"); do
  ( while :; do :; done ) &
  pids+=("$!")
done
echo "stress: $burners CPU burner(s) on $(nproc) core(s): ${pids[*]}"

passed=0
log_dir=$(mktemp -d "${TMPDIR:-/tmp}/faultlens-stress.XXXXXX")
for run in $(seq "$runs"); do
  start=$(date +%s)
  .venv/bin/pytest -q -p no:cacheprovider "$@" >"$log_dir/run$run.log" 2>&1
  rc=$?
  took=$(( $(date +%s) - start ))
  tail -n 1 "$log_dir/run$run.log" | sed "s/^/stress: run $run: pytest: /"
  if [ "$rc" -eq 0 ]; then
    passed=$((passed + 1))
    echo "stress: run $run passed in ${took}s"
  else
    echo "stress: run $run FAILED (pytest exit $rc) in ${took}s; its log: $log_dir/run$run.log"
    grep -E "^(FAILED|ERROR) " "$log_dir/run$run.log" | sed "s/^/stress:   /"
    break
  fi
done
echo "stress: $passed/$runs passed with $burners burner(s) on $(nproc) core(s); logs in $log_dir"
[ "$passed" -eq "$runs" ]
