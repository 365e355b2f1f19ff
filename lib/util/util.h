/* lib/util: error values, atomic output files, timing and progress.
 *
 * Errors are values: every fallible libmgt function returns an mgt_status and, on failure,
 * records a one-line message (lowercase, naming the file and line or field) in a thread-local
 * buffer read with mgt_err_msg().  The library never prints and never exits; cmd/ maps the
 * status to the exit code with mgt_exit_code().
 */
#ifndef MGT_UTIL_H
#define MGT_UTIL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum {
	MGT_OK = 0,
	MGT_ERR_IO,      /* read/write/fsync/rename failed, disk full: exit 1 */
	MGT_ERR_NOMEM,   /* allocation failed: exit 1 */
	MGT_ERR_USAGE,   /* bad flag or argument: exit 2 */
	MGT_ERR_INPUT,   /* bad input data (JSON, UTF-8, zstd frame, token id): exit 3 */
	MGT_ERR_VOCAB,   /* unreadable or inconsistent tokenizer files: exit 4 */
	MGT_ERR_EXISTS,  /* an output already exists: exit 5 */
	MGT_ERR_FORMAT,  /* a dataset file (.bin/.idx) is malformed or inconsistent: exit 6 */
	MGT_ERR_INTR,    /* interrupted by a signal (SIGINT, SIGTERM, ...): exit 130 */
} mgt_status;

/* Record a printf-style message for the calling thread and return code (for `return mgt_err(...)`). */
mgt_status mgt_err(mgt_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prefix the current thread's message with "PREFIX: " (adds context on the way up); returns code. */
mgt_status mgt_err_ctx(mgt_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The calling thread's last message ("" if none). Valid until the next mgt_err on this thread. */
const char *mgt_err_msg(void);
/* Documented process exit code for a status (0, 1, 2, 3, 4, 5, 6, 130). */
int mgt_exit_code(mgt_status s);

/* Allocation helpers: NULL on failure after recording MGT_ERR_NOMEM. */
void *mgt_malloc(size_t n);
void *mgt_realloc(void *p, size_t n);
char *mgt_strdup(const char *s);

/* Growable byte buffer. Zero-initialize; free with free(b->p). */
typedef struct { char *p; size_t n, cap; } mgt_buf;
mgt_status mgt_buf_reserve(mgt_buf *b, size_t extra);
mgt_status mgt_buf_add(mgt_buf *b, const void *data, size_t n);

/* Atomic output file: written as "<path>.tmp.<pid>" (flock'ed while open), fsynced and renamed
 * to <path> on commit.  mgt_afile_open refuses an existing <path> with MGT_ERR_EXISTS unless
 * overwrite is set, and first removes the temporaries of <path> left by writers that died
 * (mgt_tmp_clean_stale).  Errors: MGT_ERR_EXISTS, MGT_ERR_IO (message names the path and
 * strerror: "File too large" past `ulimit -f`, "No space left on device").
 * mgt_afile_write records the first write error (e.g. ENOSPC) and reports it at commit.
 * abort closes and unlinks the temporary; it is safe on a zeroed or already finished file.
 * While open, the temporary is registered (mgt_tmp_add_file) for removal on a signal. */
typedef struct {
	FILE *f;
	char *path, *tmp;
	int err; /* errno of the first failed write, 0 if none */
} mgt_afile;
mgt_status mgt_afile_open(mgt_afile *af, const char *path, int overwrite);
mgt_status mgt_afile_write(mgt_afile *af, const void *p, size_t n);
mgt_status mgt_afile_commit(mgt_afile *af);
void mgt_afile_abort(mgt_afile *af);

/* mkdir -p: path and every missing parent (mode 0777 less the umask); existing directories are
 * fine.  Errors: MGT_ERR_IO "PATH: cannot create directory: [COMPONENT: ]REASON" naming the
 * component that could not be made (or that exists and is not a directory: ENOTDIR), or
 * MGT_ERR_NOMEM. */
mgt_status mgt_mkdirs(const char *path);

/* A preflight for an output directory: mgt_mkdirs(dir), then a probe file created in it
 * (".mgt-write-probe.PID", exclusive), one byte written and the file removed, and the directories
 * made for it removed again: nothing is left behind.  Errors: mgt_mkdirs's (prefixed by what),
 * or MGT_ERR_IO "WHAT DIR: cannot write there: REASON". */
mgt_status mgt_dir_writable(const char *dir, const char *what);

/* Free space (bytes an unprivileged writer may use, statvfs f_bavail * f_frsize) on the file
 * system that holds path, or that would hold it: its nearest existing ancestor is asked.
 * Errors: MGT_ERR_IO naming the directory asked. */
mgt_status mgt_free_bytes(const char *path, uint64_t *out);

/* The file of a shipped preset share/mgt/KIND/NAME.json (KIND "models", "clusters"): NAME itself
 * when it holds a '/' or ".json" (a path); else $MGT_SHARE/KIND/NAME.json when readable, else
 * BIN/../share/mgt/KIND/NAME.json beside the running executable.  out [n] gets the path; dir
 * [dn] the directory searched beside the executable (for the caller's message).  Returns false
 * when no such preset is readable. */
bool mgt_share_preset(const char *kind, const char *name, char *out, size_t n, char *dir, size_t dn);

/* Temporaries being written, removed by a fatal signal (mgt_signals_install's handler, a second
 * signal in graceful mode) and by mgt_tmp_remove_all on an error exit (cmd/).  A directory
 * entry must hold plain files only (a checkpoint's iter_NNNNNNN.tmp).  The table holds 256;
 * paths are copied.  Thread-safe; registering never fails visibly (the temporary is then only
 * left behind by a signal, and cleaned at the next run). */
void mgt_tmp_add_file(const char *path);
void mgt_tmp_add_dir(const char *path);
/* Forget path (committed or removed by its writer); unknown paths are ignored. */
void mgt_tmp_forget(const char *path);
/* Remove every registered temporary and forget it (for an error exit). */
void mgt_tmp_remove_all(void);
/* The same with system calls only, for signal handlers (entries are not freed). */
void mgt_tmp_remove_all_signal(void);
/* Remove the files "<path>.tmp.<pid>" next to path whose writer is gone: pid not alive on this
 * host and the file not flock'ed (a writer on another host of a shared file system holds its
 * lock).  Returns how many were removed.  Never fails (unreadable directory: 0). */
int mgt_tmp_clean_stale(const char *path);

/* Monotonic seconds. */
double mgt_now(void);

/* Signals (mgt(7)).  mgt_signals_install (mgt-preprocess, mgt-dataset, mgt-tokenize): SIGINT,
 * SIGTERM, SIGHUP, SIGUSR1 and SIGUSR2 remove the registered temporaries and exit 128 + the
 * signal number (130 for SIGINT).  Both installers ignore SIGXFSZ, so that a write past
 * `ulimit -f` fails with EFBIG and is reported like any write error. */
extern volatile int mgt_interrupted;
void mgt_signals_install(void);
/* For long jobs that finish their step and save first (mgt-train): the first of those five
 * signals sets mgt_interrupted to its number and writes one line to stderr (unless quiet):
 * "PROG: SIGTERM: saving a checkpoint after this iteration, then exiting ..." (or, without
 * saves, "exiting after this iteration ...").  A second one writes "PROG: second SIGINT:
 * exiting without saving", removes the registered temporaries and exits 130. */
typedef struct {
	const char *prog; /* for the messages (kept, not copied) */
	bool saves;       /* the job saves a checkpoint when it stops */
	bool quiet;       /* print nothing (ranks other than 0) */
} mgt_graceful_opts;
void mgt_signals_install_graceful(const mgt_graceful_opts *o);
/* "SIGTERM", "SIGINT", "SIGHUP", "SIGUSR1", "SIGUSR2" (or without "SIG") to the signal number;
 * -1 for any other name.  mgt_signal_name: the inverse ("signal" if unknown). */
int mgt_signal_number(const char *name);
const char *mgt_signal_name(int sig);

/* Read a whole file into a NUL-terminated malloc'd buffer (*len excludes the NUL).
 * Errors: MGT_ERR_IO naming the path. Caller frees *out. */
mgt_status mgt_file_read(const char *path, char **out, size_t *len);

/* Human-readable number with thousands separators into buf (at least 32 bytes). */
const char *mgt_fmt_count(char *buf, uint64_t v);

/* Counter-based RNG: Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
 * SC'11, section 4.1).  Stateless: the 128-bit output is a pure function of a 64-bit key and a
 * 128-bit counter (ctr_hi, ctr_lo), so any element of any tensor can be drawn in any order, on any
 * rank.  mgt keys initialization by (seed, tensor name) and dropout by (seed, site), and uses the
 * element's global index as the counter, which is what makes the parallel layout not change the
 * math (doc/design.md section 3). */
void mgt_philox(uint64_t key, uint64_t ctr_hi, uint64_t ctr_lo, uint32_t out[4]);
/* Attention dropout's Philox word for score element (q, k) of score plane `plane` (plane =
 * sequence * heads_total + global head; q, k global query and key positions, q < dsq, k < dsk):
 * one Philox call serves the four elements {q0, q0 + 8} x {k0, k0 + 8} with q0 = q & ~8 and
 * k0 = k & ~8, word ((q >> 3) & 1) * 2 + ((k >> 3) & 1) of
 * mgt_philox(key, 0, (plane * dsq + q0) * dsk + k0).  The GPU's tensor-core kernels hold exactly
 * such four elements in one lane (rows gid, gid + 8 and columns c, c + 8 of two 8-column
 * accumulator tiles, in S = Q K^T and in S^T alike), so each call's four words are all used where
 * one word of four calls was. */
uint32_t mgt_attn_drop_word(uint64_t key, uint64_t plane, uint64_t dsq, uint64_t dsk, uint64_t q, uint64_t k);
/* Uniform float in [0, 1) with 24 random bits from one 32-bit Philox word: (w >> 8) * 2^-24. */
static inline float mgt_u32_to_unit(uint32_t w) { return (float)(w >> 8) * (1.0f / 16777216.0f); }
/* Standard normal for element index i of stream key: Box-Muller on the first two words of
 * philox(key, 0, i), in double precision, rounded to float.  Deterministic across platforms as
 * far as libm's log/cos are (glibc: correctly rounded in practice). */
float mgt_philox_normal(uint64_t key, uint64_t i);
/* Element types of buffers, shared by the backend (storage and GEMM operand types, lib/backend)
 * and the communicators (lib/parallel): fp32, fp64, int32, int64, bfloat16 and IEEE binary16 (the
 * 16-bit types as the bit patterns mgt_f32_to_bf16 / mgt_f32_to_f16 write). */
typedef enum { MGT_DT_F32, MGT_DT_F64, MGT_DT_I32, MGT_DT_I64, MGT_DT_BF16, MGT_DT_F16 } mgt_elem_type;
/* Bytes of one element of t: 8, 4 or 2. */
static inline size_t mgt_elem_size(mgt_elem_type t)
{
	return t == MGT_DT_F64 || t == MGT_DT_I64 ? 8 : t == MGT_DT_BF16 || t == MGT_DT_F16 ? 2 : 4;
}
/* x rounded to the nearest bfloat16 (8 significant bits) or IEEE binary16 (11 significant bits,
 * exponent -14..15, subnormals down to 2^-24), ties to even, returned as the float of that value
 * (exact in fp32).  fp16: magnitudes from 65520 up become +-inf, as a real fp16 cast does
 * (torch's .half(), CUDA's __float2half_rn); bf16 overflows to inf only past FLT_MAX's rounding.
 * NaN stays NaN, +-inf stays.  Source: IEEE 754-2008 section 4.3.1 (roundTiesToEven). */
float mgt_round_bf16(float x);
float mgt_round_fp16(float x);
/* float32 <-> bfloat16 (the upper 16 bits of a float32) and IEEE 754 binary16 bit patterns.
 * To the 16-bit types: round to nearest, ties to even (IEEE 754-2008 4.3.1; the same rounding
 * as mgt_round_bf16 / mgt_round_fp16 of lib/util, which these use), so torch's .bfloat16() and
 * .half() give the same bits; overflow goes to +-inf (binary16: magnitudes from 65520 up),
 * binary16 subnormals are produced (down to 2^-24, below half of which values go to +-0), NaN
 * stays NaN with its sign and leading payload bits, made quiet.  From the 16-bit types: exact
 * (every bf16/f16 value, subnormals, +-inf, NaN, is a float32). */
uint16_t mgt_f32_to_bf16(float x);
float mgt_bf16_to_f32(uint16_t h);
uint16_t mgt_f32_to_f16(float x);
float mgt_f16_to_f32(uint16_t h);
/* mgt_f32_to_bf16 as an inline function (its one definition: util.c's mgt_f32_to_bf16 returns
 * it), for loops that convert many elements and should not call out per element: NaN keeps its
 * sign and leading payload with the quiet bit set, +-inf stays, every other value rounds to
 * nearest even by adding 0x7fff plus the kept part's lowest bit (a carry into the exponent is
 * the overflow to inf).  Source: IEEE 754-2008 section 4.3.1. */
static inline uint16_t mgt_f32_to_bf16_inline(float x)
{
	union { float f; uint32_t u; } b = { .f = x };
	if ((b.u & 0x7f800000u) == 0x7f800000u)
		return (uint16_t)(b.u & 0x007fffffu ? b.u >> 16 | 0x0040u : b.u >> 16);
	return (uint16_t)((b.u + 0x7fffu + (b.u >> 16 & 1u)) >> 16);
}

/* The two 8-bit float formats of fp8 training (OCP 8-bit Floating Point Specification v1.0 and
 * arXiv:2209.05433; CUDA's cuda_fp8.hpp __nv_cvt_float_to_fp8):
 *   MGT_FP8_E4M3: NVIDIA's E4M3 = OCP E4M3FN: 4 exponent bits (bias 7), 3 mantissa bits, no
 *     infinities, NaN 0x7F and 0xFF, largest 0x7E = 448, smallest normal 2^-6, subnormals
 *     m 2^-9 (m = 1..7);
 *   MGT_FP8_E5M2: IEEE-like: 5 exponent bits (bias 15), 2 mantissa bits, +-Inf 0x7C / 0xFC, NaN
 *     0x7D-0x7F and 0xFD-0xFF, largest 0x7B = 57344, smallest normal 2^-14, subnormals m 2^-16. */
typedef enum { MGT_FP8_E4M3, MGT_FP8_E5M2 } mgt_fp8_format;
/* x as an fp8 byte of format f, as CUDA converts with saturation (__nv_cvt_float_to_fp8(x,
 * __NV_SATFINITE, ...), PTX cvt.rn.satfinite.{e4m3,e5m2}x2.f32, what Transformer Engine's casts
 * use): NaN -> 0x7F (positive, in both formats); otherwise x rounded to nearest, ties to even, on
 * the format's grid with its subnormals (nothing flushed: magnitudes up to half the smallest
 * subnormal, a tie included, become a zero of x's sign), and magnitudes past the largest finite
 * value, infinities included, become +-that value.  No errors. */
uint8_t mgt_f32_to_fp8(float x, mgt_fp8_format f);
/* Largest finite value of format f: 448 (E4M3) or 57344 (E5M2). */
float mgt_fp8_max(mgt_fp8_format f);
/* The value of fp8 byte v of format f, exactly (every fp8 value is a float32): NaN for the NaN
 * codes, +-inf for E5M2's infinities, signed zeros kept. */
float mgt_fp8_to_f32(uint8_t v, mgt_fp8_format f);

/* 64-bit FNV-1a of a string, used to turn a tensor name into a Philox key. */
uint64_t mgt_hash64(const char *s);

/* XXH3-64 (xxHash 0.8, seed 0: XXH3_64bits, Debian libxxhash-dev), the checksum of checkpoint
 * tensors and files (mgt-ckpt(5)): of n bytes at p (p may be NULL when n is 0); and the same
 * over bytes fed in any number of pieces (mgt_xxh3_new: NULL after recording MGT_ERR_NOMEM;
 * the caller frees it with mgt_xxh3_free, NULL fine).  The digest equals mgt_xxh3_64 of the
 * concatenated bytes.  mgt_xxh3_hex writes the value as 16 lowercase hex digits and a NUL;
 * mgt_xxh3_parse reads exactly that form back (false for anything else). */
uint64_t mgt_xxh3_64(const void *p, size_t n);
typedef struct mgt_xxh3 mgt_xxh3;
mgt_xxh3 *mgt_xxh3_new(void);
void mgt_xxh3_add(mgt_xxh3 *h, const void *p, size_t n);
uint64_t mgt_xxh3_digest(const mgt_xxh3 *h);
void mgt_xxh3_free(mgt_xxh3 *h);
void mgt_xxh3_hex(uint64_t v, char out[17]);
bool mgt_xxh3_parse(const char *s, uint64_t *v);
/* XXH3-64 of the first size bytes of the open file fd, read 1 MiB at a time with pread (memory
 * does not follow the file's size); path names it in messages.  Errors: MGT_ERR_IO (a read
 * failed or the file is shorter), MGT_ERR_NOMEM. */
mgt_status mgt_xxh3_fd(int fd, uint64_t size, const char *path, uint64_t *out);

#endif
