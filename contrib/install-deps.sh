#!/bin/sh
# Install the Debian 12 packages mgt needs when they are missing.
#   install-deps.sh build   compiler and -dev libraries
#   install-deps.sh test    also what the tests use (prove, zstd, python3-numpy, python3-jinja2, node/npm for
#                           oracles)
set -e
need=""
chk() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "ok installed" || need="$need $1"; }
for p in gcc g++ make libc6-dev libpcre2-dev libzstd-dev libjansson-dev libutf8proc-dev libicu-dev pkg-config \
	libsentencepiece-dev libzip-dev libxxhash-dev libhdf5-dev libopenblas-openmp-dev libopenmpi-dev openmpi-bin; do chk $p; done
if [ "$1" = test ]; then
	for p in perl zstd python3 python3-numpy python3-torch python3-h5py hdf5-tools \
		python3-sentencepiece sentencepiece python3-xxhash python3-jinja2; do chk $p; done
fi
[ -z "$need" ] && exit 0
echo "mgt: installing Debian packages:$need" >&2
if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $need >&2
