#!/usr/bin/env bash
# make install into a DESTDIR, as a packager runs it. Checked:
#  1. the binary, the manual page and (where it was built) the CUPTI library land under
#     DESTDIR/PREFIX with their modes, and nothing else does;
#  2. the installed binary runs and finds the installed CUPTI library (check names its path);
#  3. the manual page renders without a warning from groff, and has a section for each command
#     with every option that command's --help lists;
#  4. make uninstall removes what install put there.
# The build is the tree's (make check builds it first); install only copies and makes the page.
# Prints PASS/FAIL/SKIP lines and the totals line; exits 1 if anything failed.
set -u
cd "$(dirname "$0")/../.." || exit 1
TS=.output/tokenscope
TMP=$(mktemp -d)
. tests/lib.sh
trap 'rm -rf "$TMP"' EXIT
D=$TMP/dest
PREFIX=/opt/ts

if ! make -s --no-print-directory install DESTDIR="$D" PREFIX="$PREFIX" >"$TMP/make.out" 2>&1; then
	ko "make install" "$(tail -n 5 "$TMP/make.out")"
	finish
fi
cupti=
[ -f .output/libtokenscope_cupti.so ] && cupti=1

# 1. What landed, with its mode.
want="$PREFIX/bin/tokenscope 755
$PREFIX/share/man/man1/tokenscope.1 644"
[ -n "$cupti" ] && want="$want
$PREFIX/lib/tokenscope/libtokenscope_cupti.so 644"
got=$(cd "$D" && find . -type f -printf '/%P %m\n' | sort)
if [ "$got" = "$(sort <<<"$want")" ]; then
	ok "make install: files: $(tr '\n' ',' <<<"$got" | sed 's/,$//; s/,/, /g')"
else
	ko "make install: files" "got: $(tr '\n' ' ' <<<"$got"); want: $(tr '\n' ' ' <<<"$want")"
fi

# 2. It runs, and finds its CUPTI library.
bin=$D$PREFIX/bin/tokenscope
if [ "$("$bin" version 2>&1)" = "$("$TS" version)" ]; then
	ok "installed binary runs: $("$bin" version)"
else
	ko "installed binary runs" "$("$bin" version 2>&1 | head -c 200)"
fi
if [ -n "$cupti" ]; then
	# The library's line in check, with its path (the path may wrap onto the next line).
	line=$("$bin" check 2>&1 | sed -n '/^  cupti /{N;p}' | tr -s ' \n' ' ')
	if [[ $line == *" ok "*"$D$PREFIX/lib/tokenscope/libtokenscope_cupti.so"* ]]; then
		ok "installed binary finds its CUPTI library: check:$line"
	else
		ko "installed binary finds its CUPTI library" "check:$line"
	fi
else
	sk "installed binary finds its CUPTI library" "not built (no CUPTI headers)"
fi

# 3. The manual page.
page=$D$PREFIX/share/man/man1/tokenscope.1
warn=$(groff -man -Tutf8 -ww -z "$page" 2>&1)
text=$(MANWIDTH=100 man -l "$page" 2>/dev/null | col -b)
missing=
for c in trace run top record report check; do
	grep -q "^TOKENSCOPE ${c^^}\$" <<<"$text" || missing="$missing section:$c"
	# every long option of the command's help appears in the page
	for o in $("$TS" "$c" --help | grep -oE '^ +(-[a-zA-Z], )?--[a-z0-9-]+' |
		grep -oE -- '--[a-z0-9-]+' | sort -u); do
		grep -q -- "$o" <<<"$text" || missing="$missing $c:$o"
	done
done
if [ -z "$warn" ] && [ -z "$missing" ] && [ -n "$text" ]; then
	ok "manual page: groff -ww: no warning; man -l: a section per command, every option of each"
else
	ko "manual page" "warnings: $(head -c 300 <<<"$warn"); missing:${missing:0:300}"
fi

# 4. Uninstall.
make -s --no-print-directory uninstall DESTDIR="$D" PREFIX="$PREFIX" >"$TMP/un.out" 2>&1
left=$(cd "$D" && find . -type f | head -n 5)
if [ -z "$left" ]; then
	ok "make uninstall: no file left under DESTDIR"
else
	ko "make uninstall" "left: $left"
fi
finish
