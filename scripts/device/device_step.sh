# Sourced by the device scripts under benchmarks/: `step NAME CAP_S CMD...` runs CMD with a limit of CAP_S
# seconds or what is left of the call's budget (END, epoch seconds), whichever is less; its output goes to
# $STEP_LOGS/NAME.log ($OUT unless set) and its last TAIL (45) non-empty lines to stdout. Returns CMD's exit status (1 when skipped).
step() {
  local name=$1 cap=$2; shift 2
  local left=$(( END - $(date +%s) )); local t=$(( left < cap ? left : cap ))
  if [ "$t" -lt 15 ]; then echo "== $name: skipped, ${left}s left"; return 1; fi
  echo "== $name (limit ${t}s): $*"
  local t0=$(date +%s)
  timeout "$t" "$@" > "${STEP_LOGS:-$OUT}/$name.log" 2>&1; local rc=$?
  echo "-- rc=$rc in $(( $(date +%s) - t0 ))s"
  grep -v '^\s*$' "${STEP_LOGS:-$OUT}/$name.log" | tail -n ${TAIL:-45}
  return $rc
}
