#!/usr/bin/env bash
# Builds tokenscope's OCI image (make image; deploy/README.md, "The image"): FROM scratch,
# offline, with Debian's umoci and skopeo. One layer holding the binary at
# /usr/local/bin/tokenscope and, for the default (dynamic) build, exactly the shared libraries
# it loads, copied from this machine at their paths: those it links (libbpf, libelf, zlib,
# libzstd, nghttp2, glibc and its loader) and those it opens when a feature is used, with
# theirs (libcurl for --otlp and its TLS and HTTP libraries, capstone for Go TLS, libmicrohttpd
# for --listen and GnuTLS under it), and the CA certificates libcurl verifies https with. The
# driver's libnvidia-ml.so.1 is not in it: the NVIDIA container toolkit mounts the node's into
# /usr/lib/<arch>-linux-gnu/, where the loader looks. A static binary (make STATIC=1) goes in
# alone. Entrypoint the binary, PATH=/usr/local/bin, so the DaemonSet's `command:
# ["tokenscope"]` finds it. Writes, under OUTDIR:
#   oci/                          an OCI image layout, the image tagged VERSION
#   tokenscope-VERSION.oci.tar    the same as an oci-archive (reference name tokenscope:VERSION),
#                                 for `skopeo copy oci-archive:... docker://...` or
#                                 `ctr images import`
# File times and the image's dates are those of the last commit (SOURCE_DATE_EPOCH if set), so
# a rebuild from the same binary and libraries gives the same image (the same manifest digest;
# only the archive's own tar headers carry the time it was written).
# usage: scripts/image.sh BINARY VERSION OUTDIR
set -euo pipefail
[ $# -eq 3 ] || {
	echo "usage: scripts/image.sh BINARY VERSION OUTDIR" >&2
	exit 2
}
BIN=$1 VERSION=$2 OUT=$3
for c in umoci skopeo strip; do
	command -v "$c" >/dev/null || {
		echo "image.sh: $c is missing: scripts/deps.sh image" >&2
		exit 1
	}
done
# The libraries tokenscope opens by name when a feature is used (dl.h's callers).
DLOPENED="libcurl.so.4 libcapstone.so.4 libmicrohttpd.so.12"
static=0
readelf -d "$BIN" 2>&1 | grep "There is no dynamic section" >/dev/null && static=1
case $(uname -m) in
x86_64) arch=amd64 ;;
aarch64) arch=arm64 ;;
*) arch=$(uname -m) ;;
esac
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
date=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)

LAYOUT=$OUT/oci
ARCHIVE=$OUT/tokenscope-$VERSION.oci.tar
WORK=$(mktemp -d "$OUT.work.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
rm -rf "$LAYOUT" "$ARCHIVE"
mkdir -p "$OUT"

umoci init --layout "$LAYOUT"
umoci new --image "$LAYOUT:$VERSION"
# The layer is the difference between the unpacked (empty) bundle and what is put in it. (umoci
# insert would do it in one step, but Debian's 0.4.7 writes its layer without tar's final
# padding and end blocks.)
# Not as root, umoci unpacks without changing owners (the layer's files are still
# root's: the bundle records them).
rootless=()
[ "$(id -u)" -eq 0 ] || rootless=(--rootless)
umoci unpack "${rootless[@]}" --image "$LAYOUT:$VERSION" "$WORK/bundle" >/dev/null
root=$WORK/bundle/rootfs
install -d -m 0755 "$root/usr/local/bin"
strip -o "$root/usr/local/bin/tokenscope" "$BIN"
chmod 0755 "$root/usr/local/bin/tokenscope"
what="the static binary"
if [ "$static" -eq 0 ]; then
	# Every library the binary and the opened ones need, as the loader resolves them here
	# (ldd: the closure, the loader itself included), each copied whole at its path.
	objs=("$BIN")
	for l in $DLOPENED; do
		p=$(ldconfig -p | awk -v l="$l" '$1 == l && p == "" { p = $NF } END { if (p != "") print p }')
		[ -n "$p" ] || {
			echo "image.sh: $l is not installed: scripts/deps.sh image" >&2
			exit 1
		}
		objs+=("$p")
	done
	mapfile -t libs < <(for o in "${objs[@]}"; do
		[ "$o" = "$BIN" ] || echo "$o"
		ldd "$o" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }'
	done | sort -u)
	for l in "${libs[@]}"; do
		install -d -m 0755 "$root$(dirname "$l")"
		cp -L "$l" "$root$l"
		chmod 0644 "$root$l"
	done
	# the loader runs: executable, as on the host
	interp=$(readelf -l "$BIN" | sed -n 's/.*Requesting program interpreter: \(.*\)]/\1/p')
	chmod 0755 "$root$interp"
	if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
		install -D -m 0644 /etc/ssl/certs/ca-certificates.crt \
			"$root/etc/ssl/certs/ca-certificates.crt"
	fi
	what="the binary and ${#libs[@]} shared libraries"
	printf '%s\n' "${libs[@]}" >"$OUT/libraries.txt"
fi
find "$root" -exec touch -h -d "@$epoch" {} +
umoci repack --image "$LAYOUT:$VERSION" --history.created "$date" \
	--history.created_by "make image: $what at /usr/local/bin" \
	"$WORK/bundle"
umoci config --image "$LAYOUT:$VERSION" --created "$date" --architecture "$arch" --os linux \
	--config.entrypoint /usr/local/bin/tokenscope --config.env PATH=/usr/local/bin \
	--config.workingdir / \
	--config.label org.opencontainers.image.title=tokenscope \
	--config.label org.opencontainers.image.version="$VERSION" \
	--config.label org.opencontainers.image.description="tokenscope: $what, FROM scratch" \
	--history.created "$date" --history.created_by "make image: entrypoint and labels"
umoci gc --layout "$LAYOUT"
skopeo copy -q "oci:$LAYOUT:$VERSION" "oci-archive:$ARCHIVE:tokenscope:$VERSION"
echo "image tokenscope:$VERSION: $LAYOUT (OCI layout), $ARCHIVE ($(du -k "$ARCHIVE" | cut -f1) KiB)"
