# Sourced by the example tests. expect_refusal RC PATTERN COMMAND...: COMMAND must exit
# with status RC ("nonzero": any but 0) and print PATTERN on stderr; else the test fails.
expect_refusal() {
  local want=$1 pattern=$2 err rc
  shift 2
  set +e
  err=$("$@" 2>&1 >/dev/null)
  rc=$?
  set -e
  if { [ "$want" = nonzero ] && [ "$rc" -ne 0 ] || [ "$rc" = "$want" ]; } &&
    echo "$err" | grep -q -- "$pattern"; then
    return 0
  fi
  echo "FAIL: $* gave exit $rc (wanted $want, '$pattern' on stderr): $err"
  exit 1
}
