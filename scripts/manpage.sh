#!/bin/bash
# The manual page tokenscope(1), made from the binary's own help: the command list, then each
# command's --help as its own section, so that the page never says something the binary does
# not. Usage: scripts/manpage.sh BIN > tokenscope.1
set -euo pipefail

bin=${1:?usage: scripts/manpage.sh BIN}
version=$("$bin" version)
commands="trace run top record report check"

# Help text as roff, unfilled: a backslash doubled, a line that starts with a dot or an
# apostrophe (a request to roff) kept as text, a hyphen that starts an option made literal.
roff_text() {
	sed -e 's/\\/\\e/g' -e "s/^\\([.']\\)/\\\\\\&\\1/" -e 's/-/\\-/g'
}

# The date of the source, not of the build, so that two builds of one commit give one page.
date=$(git log -1 --format=%cs 2>/dev/null || date -u +%Y-%m-%d)

cat <<EOF
.\\" Made by scripts/manpage.sh from the help of ${version}; edit the help, not this page.
.TH TOKENSCOPE 1 "${date}" "${version}" "User Commands"
.SH NAME
tokenscope \\- latency of streamed LLM requests, traced from the kernel
.SH SYNOPSIS
.B tokenscope
.I COMMAND
[\\fIOPTION\\fR...]
.SH DESCRIPTION
.nf
EOF
"$bin" --help | roff_text
echo ".fi"
for c in $commands; do
	echo ".SH \"TOKENSCOPE ${c^^}\""
	echo ".nf"
	"$bin" "$c" --help | roff_text
	echo ".fi"
done
cat <<'EOF'
.SH FILES
.TP
.I libtokenscope_cupti.so
The CUPTI injection library that
.B tokenscope run
gives a CUDA program, for the GPU's own kernel times: looked for in $TOKENSCOPE_CUPTI_LIB, beside the binary, then in
.IR ../lib/tokenscope/
from the binary's directory (where make install puts it).
.SH SEE ALSO
The documentation in the source tree's docs/ directory: how-it-works.md, metrics.md,
building.md (kernels), security.md.
EOF
