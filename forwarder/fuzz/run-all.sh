#!/usr/bin/env bash
# Builds every fuzz target of lace-forwarder and runs each for a bounded time (default 15 s),
# starting from the real packets in ../testdata/wire (seeds.py). Exits non-zero if any target
# crashes; the crashing input is then in artifacts/<target>/ (replay it with
# `cargo +nightly fuzz run <target> artifacts/<target>/<file>`).
#
# Usage: run-all.sh [SECONDS]     Needs the nightly toolchain and cargo-fuzz.
set -euo pipefail
cd "$(dirname "$0")"
secs=${1:-15}
if ! [[ $secs =~ ^[0-9]+$ ]] || (( secs < 1 )); then
    echo "usage: $0 [SECONDS]  (a positive whole number, default 15)" >&2
    exit 2
fi

cargo +nightly fuzz build
if command -v python3 >/dev/null; then python3 seeds.py; fi

logs=target/fuzz-logs
mkdir -p "$logs"
failed=()
for target in $(cargo +nightly fuzz list); do
    log="$logs/$target.log"
    if cargo +nightly fuzz run "$target" -- -max_total_time="$secs" >"$log" 2>&1; then
        echo "ok     $target: $(grep -E '^Done [0-9]+ runs' "$log" | tail -1)"
    else
        failed+=("$target")
        echo "FAILED $target (log: fuzz/$log)"
        grep -E 'panicked|ERROR|SUMMARY|Test unit written' "$log" | head -5 || true
    fi
done

if (( ${#failed[@]} )); then
    echo "crashes in: ${failed[*]}" >&2
    exit 1
fi
echo "all fuzz targets ran ${secs}s without a crash"
