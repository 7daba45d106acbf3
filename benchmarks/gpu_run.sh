#!/usr/bin/env bash
# The one command to run when a GPU is at hand:
#
#   bash benchmarks/gpu_run.sh                                  # reports in $OUT, else ./gpu_out
#   bash benchmarks/gpu_run.sh --device cpu --smoke --out DIR   # the same at CI size (tested)
#
# Options: --out DIR; --device auto|cuda|cuda:N|cpu (auto); --smoke (tiny sizes);
#   --budget-seconds N (540: the whole run, reports included); --min-step-seconds N (20,
#   smoke 8); --no-compile; --data DIR (default gpu_data/, else ../shared/data);
#   --work DIR (scratch, default a new folder under /tmp); --python PY (python3).
#
# Each step of benchmarks/gpu_plan.py runs in its own process under `timeout`, limited to its
# weight's share of the budget still left (at least --min-step-seconds; with less left it is
# skipped), so a step that hangs is killed at its limit, recorded as "timed out after N s",
# and the rest still run. After every step OUT/gpu_check.json and OUT/gpu_check.md are
# rewritten (benchmarks/gpu_report.py); OUT/gpu_run.log holds everything printed. Nothing
# else goes to OUT. Needs no install and no network: PYTHONPATH=src, data from gpu_data/
# (staged beforehand where ../shared/data is: python benchmarks/stage_gpu_data.py).
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${OUT:-./gpu_out}"
device="auto"
flags=() # --smoke, --no-compile: passed on to the Python steps and reports
budget=540
min_step=""
data=""
work=""
py="${PYTHON:-python3}"
reserve=10 # seconds kept for the last report

usage() { sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

parse_args() {
  while (($#)); do
    case "$1" in
      --out) out="$2"; shift 2 ;;
      --device) device="$2"; shift 2 ;;
      --smoke) flags+=(--smoke); shift ;;
      --budget-seconds) budget="$2"; shift 2 ;;
      --min-step-seconds) min_step="$2"; shift 2 ;;
      --no-compile) flags+=(--no-compile); shift ;;
      --data) data="$2"; shift 2 ;;
      --work) work="$2"; shift 2 ;;
      --python) py="$2"; shift 2 ;;
      -h | --help) usage; exit 0 ;;
      *) echo "gpu_run.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
  done
  if ! [[ "$budget" =~ ^[0-9]+$ ]] || ((budget < 1)); then
    echo "gpu_run.sh: --budget-seconds takes a whole number of seconds, not '$budget'" >&2
    exit 2
  fi
  if [[ -z "$min_step" ]]; then
    if [[ " ${flags[*]} " == *" --smoke "* ]]; then min_step=8; else min_step=20; fi
  fi
  mkdir -p "$out" && out="$(cd "$out" && pwd)" || exit 1
  [[ -z "$data" || "$data" == /* ]] || data="$PWD/$data"
  [[ -z "$work" || "$work" == /* ]] || work="$PWD/$work"
}

# The reports, from what the steps left so far; a plain table if gpu_report.py fails.
report() {
  if ! timeout -k 2 20 "$py" benchmarks/gpu_report.py --work "$work" --out "$out" \
    --budget-seconds "$budget" "${flags[@]}" "$@"; then
    fallback_report
  fi
}

fallback_report() {
  echo "[gpu_run] gpu_report.py failed: writing the plain fallback report"
  {
    echo "# GPU check (fallback: gpu_report.py failed, see gpu_run.log)"
    echo
    echo "| step | exit (124/137: timed out; budget: skipped) | seconds | limit |"
    echo "|---|---|---|---|"
    while IFS=$'\t' read -r name outcome secs limit; do
      echo "| $name | $outcome | $secs | $limit |"
    done <"$work/status.tsv"
  } >"$out/gpu_check.md"
  {
    printf '{"complete": false, "fallback": true, "steps": ['
    local sep=""
    while IFS=$'\t' read -r name outcome secs limit; do
      printf '%s{"name": "%s", "outcome": "%s", "seconds": %s, "limit_s": %s}' \
        "$sep" "$name" "$outcome" "$secs" "$limit"
      sep=", "
    done <"$work/status.tsv"
    printf ']}\n'
  } >"$out/gpu_check.json"
}

# The check cannot run at all: say why, in the reports too, and stop.
abort() {
  echo "gpu_run.sh: $1" >&2
  printf '# GPU check: not run\n\n%s\n' "$1" >"$out/gpu_check.md"
  printf '{"complete": false, "error": "%s"}\n' "${1//\"/\'}" >"$out/gpu_check.json"
  return 1
}

# One step under `timeout`, in a share of the budget: its limit (TERM) is the share less a
# grace for it to exit, KILL at the end of the share. The step's own subprocesses stop a
# second before the limit (--deadline), so it can still write its record.
run_step() {
  local name="$1" share="$2" grace limit rc t0
  grace=$((share >= 20 ? 5 : 3))
  limit=$((share - grace))
  t0=$SECONDS
  echo "[gpu_run] $name: start, limit ${limit} s ($((budget - SECONDS)) s of the budget left)"
  timeout -k "$grace" "$limit" "$py" benchmarks/gpu_check.py --step "$name" \
    --work "$work" --device "$device" --deadline "$(($(date +%s) + limit - 1))" \
    ${data:+--data "$data"} "${flags[@]}" 2>&1 | tee "$work/logs/$name.log"
  rc=${PIPESTATUS[0]}
  printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - t0))" "$limit" >>"$work/status.tsv"
  if ((rc == 124 || rc == 137)); then
    echo "[gpu_run] $name: timed out after $((SECONDS - t0)) s (limit ${limit} s)"
  elif ((rc != 0)); then
    echo "[gpu_run] $name: exit $rc after $((SECONDS - t0)) s"
  fi
}

run_all() {
  SECONDS=0
  trap 'echo "[gpu_run] interrupted: writing the reports"; report; exit 130' INT TERM
  command -v timeout >/dev/null || {
    abort "needs coreutils' timeout, which is not on PATH"
    return 1
  }
  export PYTHONPATH="$repo/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
  export ELECTRA_NO_TCMALLOC=1 TOKENIZERS_PARALLELISM=false
  work="${work:-$(mktemp -d "${TMPDIR:-/tmp}/gpu_run.XXXXXX")}"
  mkdir -p "$work/steps" "$work/logs"
  : >"$work/status.tsv"
  echo "[gpu_run] $(date -u +%FT%TZ) budget ${budget} s, out $out, work $work, device $device" \
    "${flags[*]}"
  local plan=() line name weight left share weights_left=0
  if ! mapfile -t plan < <("$py" benchmarks/gpu_plan.py --list "${flags[@]}") ||
    ((${#plan[@]} == 0)); then
    abort "'$py benchmarks/gpu_plan.py --list' failed: is $py a Python 3 (--python PY)?"
    return 1
  fi
  for line in "${plan[@]}"; do weights_left=$((weights_left + ${line##* })); done
  for line in "${plan[@]}"; do
    name="${line% *}" weight="${line##* }"
    left=$((budget - reserve - SECONDS))
    share=$((left * weight / weights_left))
    ((share < min_step)) && share=$min_step
    ((share > left)) && share=$left
    weights_left=$((weights_left - weight))
    if ((left < min_step)); then
      ((left < 0)) && left=0
      printf '%s\tbudget\t%s\t%s\n' "$name" "$min_step" "$left" >>"$work/status.tsv"
      echo "[gpu_run] $name: skipped, ${left} s left (a step gets at least ${min_step} s)"
    else
      run_step "$name" "$share"
    fi
    report
  done
  report --final
  cat "$out/gpu_check.md"
  echo "[gpu_run] done in ${SECONDS} s: $out/gpu_check.md, $out/gpu_check.json, $out/gpu_run.log"
}

parse_args "$@"
cd "$repo" || exit 1
run_all 2>&1 | tee "$out/gpu_run.log"
exit "${PIPESTATUS[0]}"
