#!/usr/bin/env bash
# The suite beside a CPU hog on every core (issue 33): a colleague's busy machine, not CI's idle
# one. Runs `make test`'s pytest command (prerequisites as `make test` installs them) while one
# busy process per core competes with it, then prints the wall time and the pass/fail counts.
#   usage: scripts/test-under-load.sh [PYTEST ARGS...]   (default: the whole suite)
#   HOGS=N  how many busy processes (default: one per core)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
HOGS=${HOGS:-$(nproc)}
LOG=${LOG:-test-under-load.log}

if command -v stress-ng >/dev/null 2>&1; then
    setsid stress-ng --cpu "$HOGS" --quiet </dev/null >/dev/null 2>&1 &
    hog=$!
    what="stress-ng --cpu $HOGS"
else  # Debian's stress-ng absent: the same load from Python busy loops
    setsid python3 -c "
import multiprocessing as mp
def spin():
    while True:
        pass
ps = [mp.Process(target=spin, daemon=True) for _ in range($HOGS)]
[p.start() for p in ps]
[p.join() for p in ps]
" </dev/null >/dev/null 2>&1 &
    hog=$!
    what="$HOGS Python busy loops"
fi
# the hog runs in its own process group (setsid): the group goes with this script, however it ends
trap 'kill -- -"$hog" 2>/dev/null || true' EXIT
echo "test-under-load: $what beside the suite; log in $LOG"

if [ "$#" -eq 0 ]; then
    set -- -q -n "${WORKERS:-$(( $(nproc) + 1 ))}" --dist loadgroup --durations=25 -m "not image"
fi
t0=$(date +%s)
rc=0
PYTHONDONTWRITEBYTECODE= "$VENV/bin/pytest" "$@" 2>&1 | tee "$LOG" || rc=$?
rc=${PIPESTATUS[0]:-$rc}
t1=$(date +%s)
summary=$(grep -E '[0-9]+ (passed|failed)|no tests ran' "$LOG" | tail -1 || true)
echo "test-under-load: $(( (t1 - t0) / 60 )) min $(( (t1 - t0) % 60 )) s beside $what; ${summary:-no summary}; load average $(cut -d' ' -f1-3 /proc/loadavg)"
exit "$rc"
