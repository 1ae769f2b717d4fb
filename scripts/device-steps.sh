# shellcheck shell=bash
# Sourced by the GPU-machine scripts (device-check.sh, attention-ab.sh): their steps, each
# with its own time limit and its output under $OUT as it goes, and the gtest no-skip check.
# The caller sets OUT and `failed=()`; step leaves its exit code in last_rc.

# step NAME SECONDS CMD...: run with a limit, tee to $OUT/NAME.txt, a failure into `failed`.
step() {
  local name=$1 limit=$2
  shift 2
  echo "== $name (limit ${limit}s) =="
  local t0=$SECONDS
  timeout "$limit" "$@" 2>&1 | tee "$OUT/$name.txt" | tail -n 25
  local rc=${PIPESTATUS[0]} why=""
  # shellcheck disable=SC2034  # read by the caller (attention-ab.sh)
  last_rc=$rc
  # h3s bench and h3s demo exit 3 when the streamed bits differ from the stock bits
  # (tools/h3s/bench_cmd.hpp); other commands' 3 (pytest's internal error) is only a code.
  [ "$rc" -eq 3 ] && [[ " $* " == *"/h3s bench "* || " $* " == *"/h3s demo "* ]] && why=": bits differ"
  echo "$name: rc=$rc${why} in $((SECONDS - t0)) s" | tee -a "$OUT/steps.txt"
  [ "$rc" -eq 0 ] || failed+=("$name (rc $rc${why})")
}

# no_skips NAME JSON: a gtest JSON report with a skipped test fails (the fixture already fails
# instead of skipping under H3S_REQUIRE_GPU; this catches any other GTEST_SKIP).
no_skips() {
  if ! python3 - "$2" <<'PY'; then
import json, sys
r = json.load(open(sys.argv[1]))
skipped = [f"{s['name']}.{t['name']}" for s in r["testsuites"] for t in s["testsuite"]
           if t.get("result") == "SKIPPED" or t.get("status") == "NOTRUN"]
print(f"{r['tests']} tests, {len(skipped)} skipped: {skipped}" if skipped else
      f"{r['tests']} tests, none skipped")
sys.exit(1 if skipped else 0)
PY
    failed+=("$1 (tests skipped)")
  fi
}
