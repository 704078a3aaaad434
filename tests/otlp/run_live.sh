#!/usr/bin/env bash
# OTLP export over a real socket, plain, through a proxy and over TLS: builds
# tests/otlp/test_otlp_live.c with user/*/*.c (but the loader's files) under ASan/UBSan into
# .output/otlp (OTLP_LIVE_BIN: use that binary instead), starts tests/otlp/receiver.py on two
# loopback ports (http, and https with a certificate made here), and runs the program against
# them. Prints PASS/FAIL/SKIP lines and "N passed, N failed, N skipped".
set -u
cd "$(dirname "$0")/../.."
OUT=.output
BIN=$OUT/otlp/otlp_live
PY=/usr/bin/python3

fail() {
	echo "FAIL $1"
	echo "0 passed, 1 failed, 0 skipped"
	exit 1
}

if [ ! -x "$PY" ]; then
	echo "SKIP otlp_live: $PY not found"
	echo "0 passed, 0 failed, 1 skipped"
	exit 0
fi

# The pipeline's objects, built here with the unit tests' sanitizers (make treats its own
# .output/san objects as intermediate and removes them); rebuilt when a source or header changes.
build() {
	local obj=$OUT/otlp/obj flags objs=() pids=() f b o libs
	flags=(-O1 -g -Wall -Wextra -Werror -std=gnu11 -D_GNU_SOURCE -Iinclude -Iuser -I"$OUT"
		-Itests/unit -fsanitize=address,undefined -fno-sanitize-recover=all
		-fno-omit-frame-pointer)
	mkdir -p "$obj"
	# The Makefile's LOADER_SRCS: main and the users of the BPF skeleton and of libelf.
	loader=" $(make -s --no-print-directory print-loader-srcs) "
	for f in user/*/*.c; do
		b=$(basename "$f" .c)
		case $loader in *" $f "*) continue ;; esac
		o=$obj/$b.o
		objs+=("$o")
		if [ ! -f "$o" ] || [ -n "$(find "$f" user/*/*.h include/*.h -newer "$o" 2>/dev/null)" ]; then
			${CC:-cc} "${flags[@]}" -c "$f" -o "$o" &
			pids+=($!)
		fi
	done
	for p in "${pids[@]}"; do
		wait "$p" || return 1
	done
	libs=(-lnghttp2 -lcapstone -lcjson -lm -lpthread)
	if grep -lq 'microhttpd.h' user/*/*.c; then
		libs+=(-lmicrohttpd)
	fi
	${CC:-cc} "${flags[@]}" tests/otlp/test_otlp_live.c "${objs[@]}" -o "$BIN" "${libs[@]}"
}
if [ -n "${OTLP_LIVE_BIN:-}" ]; then
	BIN=$OTLP_LIVE_BIN
else
	build || fail "otlp_live_build: building tests/otlp/test_otlp_live.c and user/*/*.c"
fi

tmp=$(mktemp -d /tmp/tokenscope-otlp.XXXXXX)
receivers=()
cleanup() {
	kill "${receivers[@]}" 2>/dev/null
	wait "${receivers[@]}" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
# The https receiver's certificate, for localhost and 127.0.0.1; the tests verify it as their
# CA (a self-signed certificate is its own).
if ! openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=localhost \
	-addext "subjectAltName=DNS:localhost,IP:127.0.0.1" -keyout "$tmp/key.pem" \
	-out "$tmp/cert.pem" >"$tmp/openssl.log" 2>&1; then
	cat "$tmp/openssl.log"
	fail "otlp_live_cert: openssl could not make the test certificate (install openssl)"
fi
start_receiver() { # name extra-args...
	local name=$1
	shift
	"$PY" tests/otlp/receiver.py --dir "$tmp/bodies" --port-file "$tmp/$name.port" "$@" \
		2>"$tmp/$name.log" &
	receivers+=($!)
	for _ in $(seq 100); do
		[ -s "$tmp/$name.port" ] && return 0
		kill -0 "${receivers[-1]}" 2>/dev/null || break
		sleep 0.05
	done
	cat "$tmp/$name.log"
	fail "otlp_live_receiver: receiver.py ($name) did not start"
}
start_receiver http
start_receiver https --tls "$tmp/cert.pem" "$tmp/key.pem"
"$BIN" "$(cat "$tmp/http.port")" "$tmp/bodies" "$(cat "$tmp/https.port")" "$tmp/cert.pem"
