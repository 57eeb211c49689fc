# Step timing for scripts/test.sh and .ci/run (sourced, under `set -euo pipefail`): each
# step prints its name, runs, and records its wall time and whether it found its caches warm,
# so a run shows its own cost and a regression is seen.
#
#   run_step NAME COMMAND...   # runs COMMAND as one step (in this shell: functions work)
#   steps_table                # prints the table of every step recorded so far
#   start_lane NAME COMMAND... # runs COMMAND beside the steps (see "Lanes" below)
#   wait_lane NAME             # its output, then its status
#   stop_lanes                 # stops every lane still running (for an EXIT trap)
#
# Steps are appended to $CCM_STEPS_FILE (tab-separated: name, seconds, cache, CPU seconds),
# so a caller that sets it (.ci/run) gets one table over test.sh's steps and its own.
#
# "CPU" is the user + system time of the step's processes (what this shell waited for), so
# steps that run side by side show their own cost: on a cold run the cores, not the wall
# clock, are the bound, and the table's last line sums the CPU of the whole run.
#
# "cache" says what the step had to build: `cached` when no Rust crate was compiled and the
# build caches did not grow, else `cold` with the count of Rust units built (cargo's
# fingerprints written in the step) and the growth of the disk holding the caches. Steps
# that run side by side share that disk, so a cached step beside a cold one may read cold.

: "${CCM_STEPS_FILE:=$(mktemp "${TMPDIR:-/tmp}/ccm-steps.XXXXXX")}"
: "${CCM_STEPS_START:=$(date +%s)}"
export CCM_STEPS_FILE CCM_STEPS_START

steps__target_dir() {
  if [ -n "${CARGO_TARGET_DIR:-}" ]; then
    echo "$CARGO_TARGET_DIR"
  else
    echo "$(pwd)/target"
  fi
}

# Used KiB on the file system holding the caches (cargo's target, Go's, $CCM_CACHE_DIR).
steps__used_kib() {
  local dir="${CCM_CACHE_DIR:-$HOME/.cache}"
  mkdir -p "$dir"
  df -k --output=used "$dir" | tail -1 | tr -d ' '
}

# Crates compiled since MARKER: cargo writes a crate's fingerprint files when it builds it.
# In a lane (STEPS_NO_CRATES, below), none are counted: those the steps beside it compile
# meanwhile are not its own.
steps__crates_since() {
  [ -z "${STEPS_NO_CRATES:-}" ] || { echo 0; return; }
  local target
  target="$(steps__target_dir)"
  [ -d "$target" ] || { echo 0; return; }
  find "$target" -mindepth 4 -maxdepth 6 -path '*/.fingerprint/*' -type f -newer "$1" \
    -printf '%h\n' 2>/dev/null | sort -u | wc -l
}

# CPU ticks of the processes shell PID has waited for (cutime + cstime of /proc/PID/stat:
# each process's own reaped children are in its figures, so a step's whole tree counts).
# The caller passes its $BASHPID, read outside $(...) (in which BASHPID is the subshell's).
steps__child_ticks() {
  local stat
  stat="$(cat "/proc/$1/stat" 2>/dev/null)" || { echo 0; return; }
  stat="${stat##*) }" # fields after the command name, which may hold spaces
  # shellcheck disable=SC2086 # split into fields on purpose
  set -- $stat
  echo $((${14} + ${15})) # fields 16 and 17 of the line, counted from the state (field 3)
}

run_step() {
  local name="$1"
  shift
  printf '\n==> %s\n' "$name" >&2
  local marker start used ticks self=$BASHPID rc=0
  marker="$(mktemp "${TMPDIR:-/tmp}/ccm-step.XXXXXX")"
  start="$(date +%s)"
  used="$(steps__used_kib)"
  ticks="$(steps__child_ticks "$self")"
  "$@" || rc=$?
  local seconds=$(($(date +%s) - start))
  local hz cpu
  hz="$(getconf CLK_TCK)"
  cpu=$((($(steps__child_ticks "$self") - ticks + hz / 2) / hz))
  local crates grown cache
  crates="$(steps__crates_since "$marker")"
  grown=$((($(steps__used_kib) - used) / 1024))
  rm -f "$marker"
  if [ "$crates" -eq 0 ] && [ "$grown" -lt 16 ]; then
    cache=cached
  else
    cache="cold ($crates built, +$grown MiB)"
  fi
  printf '%s\t%s\t%s\t%s\n' "$name" "$seconds" "$cache" "$cpu" >>"$CCM_STEPS_FILE"
  printf '==> %s: %ss (CPU %ss), %s%s\n' "$name" "$seconds" "$cpu" "$cache" "$([ "$rc" -eq 0 ] || echo ", FAILED (exit $rc)")" >&2
  return "$rc"
}

# Steps run side by side (the Go lane, the jobs beside the tests, indented), so the table
# ends with the run's wall-clock time, not a sum of the seconds; the CPU column sums (the
# indented rows are part of the step after them, so only the others are added).
steps_table() {
  [ -s "$CCM_STEPS_FILE" ] || return 0
  awk -F'\t' -v wall=$(($(date +%s) - CCM_STEPS_START)) '
    { name[NR] = $1; secs[NR] = $2; cache[NR] = $3; cpu[NR] = $4
      if (length($1) > w) w = length($1)
      if ($1 !~ /^ /) total += $4 }
    END {
      if (w < 10) w = 10
      printf "\n%-*s  %7s  %7s  %s\n", w, "step", "seconds", "CPU s", "cache"
      for (i = 1; i <= NR; i++) printf "%-*s  %7d  %7d  %s\n", w, name[i], secs[i], cpu[i], cache[i]
      printf "%-*s  %7d  %7d\n", w, "wall clock, CPU of the run", wall, total
    }' "$CCM_STEPS_FILE" >&2
}

# Lanes: commands that run beside the steps (the Go builds from the start of a run), each in
# a session of its own, so that it is stopped whole if the run stops, its output kept until
# wait_lane prints it. COMMAND is a program, or run_step and its arguments. A lane builds no
# Rust, so its steps count no crates (STEPS_NO_CRATES).
#
# `start_lane --low-priority NAME ...` runs a lane that only uses what the others leave idle
# (a build needed late). Not by `nice` alone: under Linux's scheduler autogroups (one per
# session, on by default) nice ranks processes within their session only, and a lane is a
# session of its own, which would get as much of the CPU as the whole run. So the lane's
# autogroup is set to nice 10 (/proc/self/autogroup), and nice 10 within it where there
# are no autogroups.
#
# A lane is not this shell's child (it is started from a subshell that exits at once): the
# CPU of a child is added to its parent's when the parent reaps it, which bash does for a
# background job whenever it ends, so a lane's whole CPU would land in whatever step was
# running then. Its own steps have rows of their own; wait_lane reads its exit status from
# a file it writes last.
steps__lanes=""

start_lane() {
  local low=false
  if [ "$1" = --low-priority ]; then low=true; shift; fi
  local name="$1"
  shift
  [ -n "$steps__lanes" ] || steps__lanes="$(mktemp -d "${TMPDIR:-/tmp}/ccm-lanes.XXXXXX")"
  # shellcheck disable=SC2016 # expanded by the lane's bash
  (
    STEPS_NO_CRATES=1 STEPS_LOW_PRIORITY=$low STEPS_LANE_STATUS="$steps__lanes/$name.status" \
      setsid bash -c '
      if [ "$STEPS_LOW_PRIORITY" = true ]; then
        { [ -w /proc/self/autogroup ] && echo 10 >/proc/self/autogroup; } 2>/dev/null
        renice -n 10 -p $$ >/dev/null
      fi
      unset STEPS_LOW_PRIORITY
      status=0
      (source scripts/lib/steps.sh && "$@") || status=$?
      echo "$status" >"$STEPS_LANE_STATUS.tmp" && mv "$STEPS_LANE_STATUS.tmp" "$STEPS_LANE_STATUS"
      ' "$name" "$@" >"$steps__lanes/$name.log" 2>&1 </dev/null &
    echo "$!" >"$steps__lanes/$name.pid"
  )
}

wait_lane() {
  local status pid
  pid="$(cat "$steps__lanes/$1.pid")"
  until [ -e "$steps__lanes/$1.status" ]; do
    # Gone without a status: killed (SIGKILL, or stopped whole by stop_lanes elsewhere).
    kill -0 "$pid" 2>/dev/null || [ -e "$steps__lanes/$1.status" ] || {
      echo 137 >"$steps__lanes/$1.status"
      break
    }
    sleep 0.5
  done
  status="$(cat "$steps__lanes/$1.status")"
  rm -f "$steps__lanes/$1.pid" "$steps__lanes/$1.status"
  printf '\n==> lane %s\n' "$1" >&2
  cat "$steps__lanes/$1.log" >&2
  [ "$status" -eq 0 ] || echo "lane $1 failed (exit $status; its output is above)" >&2
  return "$status"
}

stop_lanes() {
  [ -n "$steps__lanes" ] || return 0
  local pid
  for pid in "$steps__lanes"/*.pid; do
    if [ -e "$pid" ]; then kill -TERM -- "-$(cat "$pid")" 2>/dev/null || true; fi
  done
  rm -rf "$steps__lanes"
  steps__lanes=""
}
