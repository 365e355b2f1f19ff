#!/usr/bin/python3
"""Print the OPENBLAS_CORETYPE that Debian's OpenBLAS 0.3.21 should have picked on this CPU, when
it fell back to its SSE3 kernels (Prescott) on a CPU it does not know (SkylakeX with AVX-512,
Haswell with AVX2 and FMA); nothing otherwise.  mgt-train picks the AVX kernels itself
(lib/backend/cpu.c); the CPU benches run PyTorch once more with this set, so that the comparison
is kernel for kernel too."""
import ctypes

lib = ctypes.CDLL("libblas.so.3")
lib.openblas_get_corename.restype = ctypes.c_char_p
core = lib.openblas_get_corename().decode()
flags = set(open("/proc/cpuinfo").read().split("flags")[1].split("\n")[0].split())
if core == "Prescott" and {"avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512cd"} <= flags:
    print("SkylakeX")
elif core == "Prescott" and {"avx2", "fma"} <= flags:
    print("Haswell")
