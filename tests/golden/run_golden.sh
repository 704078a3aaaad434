#!/usr/bin/env bash
# The golden test: replays each recording of tests/golden/recordings/ with this build and
# compares every output (outputs.sh) with the one kept in tests/golden/expected/, byte for byte.
# A difference is a change of behaviour: a bug, or a change on purpose that make_golden.sh
# --outputs re-baselines (the commit says why). No root needed: report reads files only.
# Prints a PASS or FAIL line per recording (FAIL: which outputs differ, and the first lines of
# the difference) and "N passed, N failed, N skipped".
set -u
cd "$(dirname "$0")/../.." || exit 1
TS=${TOKENSCOPE:-.output/tokenscope}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
DIR=tests/golden
# shellcheck source=tests/golden/outputs.sh
. "$DIR/outputs.sh"
pass=0 fail=0 skip=0
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

if [ ! -x "$TS" ]; then
	echo "SKIP golden: $TS is not built"
	echo "0 passed, 0 failed, 1 skipped"
	exit 0
fi
for rec in "$DIR"/recordings/*.tsr; do
	name=$(basename "$rec" .tsr)
	golden_outputs "$rec" "$TMP"
	bad=""
	for k in $GOLDEN_KINDS; do
		if ! cmp -s "$DIR/expected/$name.$k" "$TMP/$name.$k"; then
			bad="$bad $k"
			diff "$DIR/expected/$name.$k" "$TMP/$name.$k" 2>&1 | head -n 6 |
				cut -c1-200 >"$TMP/$name.$k.diff"
		fi
	done
	if [ -z "$bad" ]; then
		echo "PASS golden $name: $(echo "$GOLDEN_KINDS" | wc -w) outputs byte for byte"
		pass=$((pass + 1))
	else
		echo "FAIL golden $name: differs in$bad"
		for k in $bad; do sed "s/^/    $k: /" "$TMP/$name.$k.diff"; done
		fail=$((fail + 1))
	fi
done
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" = 0 ]
