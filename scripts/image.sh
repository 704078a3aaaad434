#!/usr/bin/env bash
# Builds the OCI image of the static tokenscope (make image; deploy/README.md, "The image"):
# FROM scratch, offline, with Debian's umoci and skopeo. One layer holding the stripped binary
# at /usr/local/bin/tokenscope; entrypoint that binary, PATH=/usr/local/bin, so the DaemonSet's
# `command: ["tokenscope"]` finds it. Writes, under OUTDIR:
#   oci/                          an OCI image layout, the image tagged VERSION
#   tokenscope-VERSION.oci.tar    the same as an oci-archive (reference name tokenscope:VERSION),
#                                 for `skopeo copy oci-archive:... docker://...` or
#                                 `ctr images import`
# File times and the image's dates are those of the last commit (SOURCE_DATE_EPOCH if set), so
# a rebuild of the same binary gives the same image (the same manifest digest; only the
# archive's own tar headers carry the time it was written).
# usage: scripts/image.sh STATIC_BINARY VERSION OUTDIR
set -euo pipefail
[ $# -eq 3 ] || {
	echo "usage: scripts/image.sh STATIC_BINARY VERSION OUTDIR" >&2
	exit 2
}
BIN=$1 VERSION=$2 OUT=$3
for c in umoci skopeo strip; do
	command -v "$c" >/dev/null || {
		echo "image.sh: $c is missing: scripts/deps.sh image" >&2
		exit 1
	}
done
# A dynamic binary would need its libraries beside it, which a scratch image has not.
if ! readelf -d "$BIN" 2>&1 | grep "There is no dynamic section" >/dev/null; then
	echo "image.sh: $BIN is not a static executable (make STATIC=1)" >&2
	exit 1
fi
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
find "$root" -exec touch -h -d "@$epoch" {} +
umoci repack --image "$LAYOUT:$VERSION" --history.created "$date" \
	--history.created_by "make image: $(basename "$BIN") (make STATIC=1) at /usr/local/bin" \
	"$WORK/bundle"
umoci config --image "$LAYOUT:$VERSION" --created "$date" --architecture "$arch" --os linux \
	--config.entrypoint /usr/local/bin/tokenscope --config.env PATH=/usr/local/bin \
	--config.workingdir / \
	--config.label org.opencontainers.image.title=tokenscope \
	--config.label org.opencontainers.image.version="$VERSION" \
	--config.label org.opencontainers.image.description="tokenscope, static, FROM scratch" \
	--history.created "$date" --history.created_by "make image: entrypoint and labels"
umoci gc --layout "$LAYOUT"
skopeo copy -q "oci:$LAYOUT:$VERSION" "oci-archive:$ARCHIVE:tokenscope:$VERSION"
echo "image tokenscope:$VERSION: $LAYOUT (OCI layout), $ARCHIVE ($(du -k "$ARCHIVE" | cut -f1) KiB)"
