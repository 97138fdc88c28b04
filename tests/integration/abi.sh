#!/bin/bash
# abi.sh - libarbor exports exactly what its public headers declare.
#
# lib/libarbor.map is generated from lib/include/arbor/*.h by
# scripts/libarbor-map.py; the shared library must export every function
# the headers declare and nothing else (the core stays private), and the
# map must be the one the headers give today.
. "$(dirname "$0")/lib.sh" "$@"

LIB=$(ls "$BUILD"/lib/libarbor.so.* 2>/dev/null | head -n 1)
[ -n "$LIB" ] || fail "libarbor.so not built"
command -v nm >/dev/null || skip "nm (binutils) missing"
python3 "$SRCDIR/scripts/libarbor-map.py" >"$TMP/map"
diff -u "$SRCDIR/lib/libarbor.map" "$TMP/map" ||
	fail "lib/libarbor.map is stale: run scripts/libarbor-map.py > lib/libarbor.map"
grep -oE 'arb_[a-z0-9_]+' "$TMP/map" | sort -u >"$TMP/declared"
nm -D --defined-only "$LIB" | awk '$2 ~ /^[TDB]$/ {print $3}' | sed 's/@.*//' |
	sort -u >"$TMP/exported"
if ! diff -u "$TMP/declared" "$TMP/exported"; then
	fail "exported symbols (+) and public declarations (-) differ"
fi
log "$(wc -l <"$TMP/exported") symbols, all declared in include/arbor"
finish
