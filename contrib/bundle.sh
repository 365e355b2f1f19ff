#!/bin/sh
# contrib/bundle.sh BUILDDIR OUTDIR: lay out a self-contained mgt bundle (make bundle) for a machine
# that has the CUDA libraries but none of mgt's Debian libraries (the lent GPU machine, a cluster
# image):
#   OUTDIR/bin/        the programs, linked statically against HDF5, jansson, zstd, PCRE2,
#                      utf8proc, OpenBLAS and libgomp (built without MPI: one process per run)
#   OUTDIR/lib/        libsentencepiece.so.0 and, when a program uses it, libzip.so.4 with its
#                      libbz2, libcrypto and libz (Debian has no static ones), found by the programs
#                      through their rpath $ORIGIN/../lib (a DT_RPATH: it serves indirect
#                      dependencies too)
#   OUTDIR/libexec/    the GPU test and benchmark programs (test_cuda_ops, gemm_ceiling), which
#                      tests/gpu/check.sh and tests/bench/gpu.sh run
#   OUTDIR/share/mgt/  model presets, tokenizers, the KJV sample data
#   OUTDIR/man/        the manual pages
#   OUTDIR/env.sh      `. env.sh` adds the bundle to PATH and, when the CUDA libraries are not
#                      where the programs were linked, their directory (CUDA_HOME/lib64 or the
#                      nvidia-* Python wheels) to LD_LIBRARY_PATH
# Then it checks with ldd that every program needs nothing outside the allowed set: glibc, libgcc,
# libstdc++, the CUDA libraries and the bundle's own lib/ (exit 1 naming the program and library
# otherwise).
set -eu
b=$1 out=$2
rm -rf "$out.tmp"
mkdir -p "$out.tmp/bin" "$out.tmp/lib" "$out.tmp/libexec" "$out.tmp/share" "$out.tmp/man"
for l in $(for p in "$b"/bin/mgt*; do ldd "$p"; done |
	awk '/libsentencepiece|libzip\.so|libbz2\.so|libcrypto\.so|libz\.so/ {print $3}' | sort -u); do
	cp -L "$l" "$out.tmp/lib/"
done
cp "$b"/bin/mgt* "$out.tmp/bin/"
cp "$b"/tests/gpu/test_cuda_ops "$b"/bench/gemm_ceiling "$out.tmp/libexec/"
strip --strip-debug "$out.tmp"/bin/* "$out.tmp"/libexec/* # small enough to copy to a GPU machine
cp -R share/mgt "$out.tmp/share/"
cp -R man/man1 man/man5 man/man7 "$out.tmp/man/"
cat > "$out.tmp/env.sh" <<'ENV'
# . env.sh: put this mgt bundle on PATH and make the CUDA libraries findable.
d=$(cd "$(dirname "${BASH_SOURCE:-$0}")" && pwd)
export PATH="$d/bin:$PATH"
for l in "${CUDA_HOME:-/usr/local/cuda}/lib64" \
	$(python3 -c 'import nvidia, os; p = os.path.dirname(nvidia.__path__[0]) + "/nvidia"; print(" ".join(p + "/" + x + "/lib" for x in ("cublas", "nccl", "cuda_runtime")))' 2>/dev/null); do
	[ -d "$l" ] && LD_LIBRARY_PATH="$l${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done
export LD_LIBRARY_PATH
ENV
allowed='linux-vdso|ld-linux|libc\.so|libm\.so|libpthread|libdl\.so|librt\.so|libgcc_s|libstdc\+\+|libcublas|libcublasLt|libnccl|libcudart'
bad=0
abs=$(cd "$out.tmp" && pwd)
for p in "$out.tmp"/bin/mgt* "$out.tmp"/libexec/*; do
	for lib in $(ldd "$p" | awk '{print $1 "=" $3}'); do
		case $lib in "${lib%%=*}=$abs/"*"/../lib/"*) continue ;; esac # the bundle's own lib/
		lib=${lib%%=*}
		if ! echo "$lib" | grep -Eq "$allowed"; then
			echo "bundle: $(basename "$p") needs $lib, which the target machine may not have" >&2
			bad=1
		fi
	done
done
[ $bad = 0 ] || { rm -rf "$out.tmp"; exit 1; }
rm -rf "$out"
mv "$out.tmp" "$out"
echo "bundle: $out ($(du -sh "$out" | cut -f1)); on the target: . $out/env.sh; mgt-train --help"
