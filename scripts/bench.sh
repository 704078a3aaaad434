#!/usr/bin/env bash
# Benchmarks (not part of make check): see scripts/bench.py for what is measured and how.
set -euo pipefail
cd "$(dirname "$0")/.."
exec /usr/bin/python3 scripts/bench.py "$@"
