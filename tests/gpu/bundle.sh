#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Gathers what a bare x86-64 Linux machine (a C compiler, the CUDA toolkit,
# CMake, ninja and Python; no package registry, none of kvtier's libraries)
# needs to build and run the GPU check, tests/gpu/run.sh, into one folder.
# Run it on a Debian 12 machine with apt (it downloads, it installs nothing):
#
#   tests/gpu/bundle.sh [DIR]          (default build/gpu-bundle)
#
# It fetches the Debian packages below with `apt-get download` (kept in
# DIR-debs, so a second run needs no network; delete that folder to fetch
# newer versions), unpacks them with `dpkg -x` and keeps, in DIR:
#   include/         the headers (the multiarch folder merged in)
#   lib/             static libraries where Debian ships them (liburing, LZ4,
#                    xxHash, jansson, inih, libcrypto), so the binaries need no
#                    loader path; cmocka as a shared library (Debian ships no .a)
#   lib/pkgconfig/   their .pc files, made relative to themselves (${pcfiledir}),
#                    so the folder works wherever it is copied
#   bin/pkg-config   pkgconf, for machines without a pkg-config
#   MANIFEST         the packages and versions it holds
# tests/gpu/run.sh uses it when the machine lacks the libraries. The libraries
# are built for glibc 2.36 (Debian 12); they link where glibc is 2.34 or newer.
set -eu

case "${1:-}" in
-h | --help)
	sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'
	exit 0
	;;
esac
cd "$(dirname "$0")/../.."
DIR=${1:-build/gpu-bundle}
DEBS=$DIR-debs
ARCH=x86_64-linux-gnu

# package: why the GPU check needs it
PKGS="liburing-dev liblz4-dev libxxhash-dev libjansson-dev libssl-dev
      libblosc-dev libzstd-dev zlib1g-dev libsnappy-dev
      libinih-dev libcmocka-dev libcmocka0 pkgconf-bin libpkgconf3"
# liburing-dev .. libssl-dev: the kvtier library (io_uring, LZ4, XXH3,
#   JSON, SHA-256 from libcrypto); libblosc-dev: the SSD codec, with
#   zlib1g-dev and libsnappy-dev because the static libblosc.a calls them
#   (its blosc.pc names none of them); libzstd-dev: the shuf16-zstd codec,
#   and libblosc.a calls it too; libinih-dev: configure needs kvtierd's
#   INI parser; libcmocka-dev + libcmocka0: the tests; pkgconf-bin +
#   libpkgconf3: CMake finds all of them through pkg-config.

die() {
	echo "bundle.sh: $*" >&2
	exit 1
}

for tool in apt-get dpkg-deb; do
	command -v "$tool" >/dev/null 2>&1 || die "needs $tool (run it on Debian 12 with apt)"
done
[ "$(dpkg --print-architecture 2>/dev/null)" = amd64 ] ||
	die "makes an x86-64 bundle: run it on an amd64 Debian machine"

mkdir -p "$DEBS"
missing=""
for p in $PKGS; do
	ls "$DEBS/${p}_"*.deb >/dev/null 2>&1 || missing="$missing $p"
done
if [ -n "$missing" ]; then
	echo "fetching:$missing"
	# apt's download sandbox user cannot write into a root-owned build folder
	# shellcheck disable=SC2086
	(cd "$DEBS" && apt-get download -q -o APT::Sandbox::User=root $missing) ||
		die "apt-get download failed (no network or no package lists: apt-get update)"
fi

stage=$(mktemp -d "${TMPDIR:-/tmp}/kvt-bundle.XXXXXX")
trap 'rm -rf "$stage"' EXIT
echo "# kvtier GPU-check bundle, made by tests/gpu/bundle.sh on $(date -u +%Y-%m-%d)" >"$stage/MANIFEST"
for p in $PKGS; do
	# shellcheck disable=SC2012 # Debian package file names are plain
	deb=$(ls "$DEBS/${p}_"*.deb | tail -1)
	dpkg-deb -x "$deb" "$stage/root"
	echo "$(dpkg-deb -f "$deb" Package) $(dpkg-deb -f "$deb" Version)" >>"$stage/MANIFEST"
done

r=$stage/root/usr
out=$stage/out
mkdir -p "$out/include" "$out/lib/pkgconfig" "$out/bin"
# no symbolic links in the bundle (copied as files), so that any way of
# copying the folder keeps it whole
cp -RLp "$r/include/." "$out/include/"
rm -rf "$out/include/$ARCH" "$out/include/INIReader.h" "$out/include/cmockery"
cp -RLp "$r/include/$ARCH/." "$out/include/"
for f in "$r/lib/$ARCH/"*; do
	case "${f##*/}" in
	# not used by kvtier: libssl, the C++ INIReader, the cmockery aliases
	pkgconfig | cmake | libssl.* | libINIReader.* | libcmockery.*) ;;
	# zlib1g-dev's libz.so is an absolute link into this machine's /lib
	libz.so) ;;
	# a -dev package's .so points at a runtime package not fetched: leaving
	# it out leaves the .a, which the linker then takes
	*) if [ -e "$f" ]; then cp -Lp "$f" "$out/lib/"; fi ;;
	esac
done
for pc in liburing liblz4 blosc libzstd libxxhash jansson libcrypto inih cmocka; do
	# shellcheck disable=SC2016 # ${pcfiledir} is pkg-config's, not the shell's
	sed -e 's|^prefix=/usr$|prefix=${pcfiledir}/../..|' \
	    -e "s|/usr/lib/$ARCH|\${pcfiledir}/..|g" \
	    -e 's|/usr/include|${pcfiledir}/../../include|g' \
	    -e "s|}/lib/$ARCH|}/lib|g" \
	    "$r/lib/$ARCH/pkgconfig/$pc.pc" >"$out/lib/pkgconfig/$pc.pc"
	! grep -n '/usr' "$out/lib/pkgconfig/$pc.pc" ||
		die "$pc.pc still names /usr after relocation"
done
# the static libblosc.a needs its own compressors after it on the link line
# (snappy is C++); the imported target takes only --libs, not --static
sed -i 's|^Libs: \(.*\)-lblosc *$|Libs: \1-lblosc -llz4 -lzstd -lz -lsnappy -lstdc++ -lm|' \
	"$out/lib/pkgconfig/blosc.pc"
grep -q -- '-lblosc -llz4 -lzstd' "$out/lib/pkgconfig/blosc.pc" ||
	die "blosc.pc: could not add the libraries libblosc.a needs"
cp -Lp "$r/bin/pkgconf" "$out/bin/"
cat >"$out/bin/pkg-config" <<'EOF'
#!/bin/sh
# pkgconf with its library beside it; the bundle's .pc files come first
here=$(cd "$(dirname "$0")/.." && pwd)
LD_LIBRARY_PATH=$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
PKG_CONFIG_PATH=$here/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH} \
	exec "$here/bin/pkgconf" "$@"
EOF
chmod 755 "$out/bin/pkg-config"

# the bundle must answer for every library from where it lies
for pc in liburing liblz4 blosc libzstd libxxhash jansson libcrypto inih cmocka; do
	libs=$("$out/bin/pkg-config" --libs "$pc") || die "pkg-config --libs $pc fails in the bundle"
	case "$libs" in
	*"$out/lib"*) ;;
	*) die "pkg-config --libs $pc does not point into the bundle: $libs" ;;
	esac
done

rm -rf "$DIR"
mkdir -p "$(dirname "$DIR")"
mv "$out" "$DIR"
cp "$stage/MANIFEST" "$DIR/MANIFEST"
echo "bundle: $DIR, $(du -sh "$DIR" | cut -f1) ($(du -sb "$DIR" | cut -f1) bytes)"
sed 1d "$DIR/MANIFEST" | sed 's/^/  /'
