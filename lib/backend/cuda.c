/* lib/backend: the CUDA backend's host side (memory, errors, the op table).  The math runs in the
 * kernels/ launchers (kernels/kernels.h) and, for the linear layers, cuBLASLt (cuda_gemm.c).
 * Attention's ops are in cuda_attn.c.
 *
 * Everything is queued on one non-blocking stream; download, sync, sumsq and xent_loss wait for it.
 * Ops that need scratch memory share one device buffer owned by the backend, grown (after a
 * synchronize) when a launcher asks for more; work queued on the one stream runs in order, so one
 * op's scratch is never overwritten while an earlier op still reads it.
 *
 * Memory accounting: cudaFree does not tell a size, so alloc keeps a pointer -> size map (an open
 * addressing hash table) and counts bytes_in_use / bytes_peak from it.  alloc's memory and the
 * committed granules of reserve's (cuda_vmm.c) are counted (backend.h); the scratch buffer, the
 * cuBLASLt workspace and CUDA's own context are not.
 */
#include "backend/cuda_impl.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CUDA_TOMB ((void *)1)
/* The scratch buffer's first size and its growth margin. */
#define SCRATCH_MIN ((size_t)64 << 20)
#define SCRATCH_ROUND ((size_t)1 << 20)

static const mgt_backend_ops cuda_ops;

static cuda_impl *impl(mgt_backend *be) { return be->impl; }
static mgt_k_stream stream(mgt_backend *be) { return impl(be)->stream; }

/* ---- errors ---- */

void mgt_cuda_fail(mgt_backend *be, mgt_status code, const char *fmt, ...)
{
	cuda_impl *im = impl(be);
	char buf[sizeof im->msg];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	mgt_err(code, "%s", buf);
	if (im->err == MGT_OK) {
		im->err = code;
		memcpy(im->msg, buf, sizeof buf);
	}
}

/* MGT_ERR_NOMEM for out of device memory, MGT_ERR_IO for any other CUDA error. */
static mgt_status cuda_code(cudaError_t e)
{
	return e == cudaErrorMemoryAllocation ? MGT_ERR_NOMEM : MGT_ERR_IO;
}

bool mgt_cuda_ok(mgt_backend *be, const char *op, int rc)
{
	if (rc == cudaSuccess)
		return true;
	cudaGetLastError(); /* a non-sticky error must not be blamed on the next launch */
	mgt_cuda_fail(be, cuda_code((cudaError_t)rc), "cuda backend: %s: %s", op,
		      cudaGetErrorString((cudaError_t)rc));
	return false;
}

/* The recorded failure, recorded again as the calling thread's message; MGT_OK if none. */
static mgt_status pending(mgt_backend *be)
{
	cuda_impl *im = impl(be);
	return im->err == MGT_OK ? MGT_OK : mgt_err(im->err, "%s", im->msg);
}

/* ---- the allocation map ---- */

static size_t slot_hash(const void *p, size_t cap)
{
	uint64_t h = (uint64_t)((uintptr_t)p >> 8) * 0x9E3779B97F4A7C15ull;
	return (size_t)(h >> 29) & (cap - 1);
}

/* The live slot holding p, or NULL. */
static cuda_slot *map_find(cuda_impl *im, const void *p)
{
	if (!im->cap)
		return NULL;
	for (size_t i = slot_hash(p, im->cap);; i = (i + 1) & (im->cap - 1)) {
		if (im->slots[i].p == p)
			return &im->slots[i];
		if (!im->slots[i].p)
			return NULL;
	}
}

static void map_place(cuda_slot *slots, size_t cap, void *p, size_t bytes)
{
	size_t i = slot_hash(p, cap);
	while (slots[i].p && slots[i].p != CUDA_TOMB)
		i = (i + 1) & (cap - 1);
	slots[i] = (cuda_slot){p, bytes};
}

/* Rehash into a table at most a quarter full (tombstones dropped). */
static mgt_status map_rehash(cuda_impl *im)
{
	size_t cap = 1024;
	while (cap < 4 * (im->live + 1))
		cap *= 2;
	cuda_slot *s = calloc(cap, sizeof *s);
	if (!s)
		return mgt_err(MGT_ERR_NOMEM, "cuda backend: alloc: out of host memory");
	for (size_t i = 0; i < im->cap; i++)
		if (im->slots[i].p && im->slots[i].p != CUDA_TOMB)
			map_place(s, cap, im->slots[i].p, im->slots[i].bytes);
	free(im->slots);
	im->slots = s;
	im->cap = cap;
	im->tombs = 0;
	return MGT_OK;
}

static mgt_status map_put(cuda_impl *im, void *p, size_t bytes)
{
	if (2 * (im->live + im->tombs + 1) > im->cap && map_rehash(im) != MGT_OK)
		return MGT_ERR_NOMEM;
	map_place(im->slots, im->cap, p, bytes);
	im->live++;
	return MGT_OK;
}

/* ---- memory ---- */

void *mgt_cuda_alloc(mgt_backend *be, size_t bytes)
{
	cuda_impl *im = impl(be);
	void *p = NULL;
	cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
	if (e != cudaSuccess) {
		cudaGetLastError();
		mgt_err(cuda_code(e), "cuda backend: alloc: cannot allocate %zu bytes: %s", bytes,
			cudaGetErrorString(e));
		return NULL;
	}
	if (map_put(im, p, bytes) != MGT_OK) {
		cudaFree(p);
		return NULL;
	}
	e = cudaMemsetAsync(p, 0, bytes, im->stream);
	if (e != cudaSuccess) {
		cudaGetLastError();
		map_find(im, p)->p = CUDA_TOMB;
		im->live--, im->tombs++;
		cudaFree(p);
		mgt_err(MGT_ERR_IO, "cuda backend: alloc: %s", cudaGetErrorString(e));
		return NULL;
	}
	be->bytes_in_use += bytes;
	if (be->bytes_in_use > be->bytes_peak)
		be->bytes_peak = be->bytes_in_use;
	return p;
}

/* Waits for the stream first: queued work may still use p. */
void mgt_cuda_free(mgt_backend *be, void *p)
{
	cuda_impl *im = impl(be);
	if (!p)
		return;
	cuda_slot *s = map_find(im, p);
	if (s) {
		be->bytes_in_use -= s->bytes;
		s->p = CUDA_TOMB;
		im->live--, im->tombs++;
	}
	if (mgt_cuda_ok(be, "free", cudaStreamSynchronize(im->stream)))
		mgt_cuda_ok(be, "free", cudaFree(p));
}

/* Copy and wait (host buffers may be pageable and are the caller's again on return). */
static mgt_status cu_copy(mgt_backend *be, const char *op, void *dst, const void *src, size_t bytes,
			  enum cudaMemcpyKind kind)
{
	cuda_impl *im = impl(be);
	if (im->err != MGT_OK)
		return pending(be);
	if (!bytes)
		return MGT_OK;
	cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, im->stream);
	if (e == cudaSuccess)
		e = cudaStreamSynchronize(im->stream);
	return mgt_cuda_ok(be, op, e) ? MGT_OK : im->err;
}

mgt_status mgt_cuda_upload(mgt_backend *be, void *dst, const void *src, size_t bytes)
{
	return cu_copy(be, "upload", dst, src, bytes, cudaMemcpyHostToDevice);
}

mgt_status mgt_cuda_download(mgt_backend *be, void *dst, const void *src, size_t bytes)
{
	return cu_copy(be, "download", dst, src, bytes, cudaMemcpyDeviceToHost);
}

void mgt_cuda_zero(mgt_backend *be, void *p, size_t bytes)
{
	if (bytes)
		mgt_cuda_ok(be, "zero", cudaMemsetAsync(p, 0, bytes, impl(be)->stream));
}

/* reserve, commit, unreserve and discard: cuda_vmm.c. */

/* sync cannot return the backend's failure; it records it again as the thread's message.  The
 * stream is idle afterwards: granules discard gave back are unmapped. */
void mgt_cuda_sync(mgt_backend *be)
{
	if (mgt_cuda_ok(be, "sync", cudaStreamSynchronize(impl(be)->stream))) {
		mgt_cuda_vmm_flush(be, true);
		pending(be);
	}
}

void *mgt_cuda_scratch(mgt_backend *be, const char *op, size_t bytes)
{
	cuda_impl *im = impl(be);
	if (im->scratch && bytes <= im->scratch_bytes)
		return im->scratch;
	size_t want = (bytes + bytes / 4 + SCRATCH_ROUND - 1) / SCRATCH_ROUND * SCRATCH_ROUND;
	if (want < SCRATCH_MIN)
		want = SCRATCH_MIN;
	if (im->scratch) {
		if (!mgt_cuda_ok(be, op, cudaStreamSynchronize(im->stream)))
			return NULL;
		cudaFree(im->scratch);
		im->scratch = NULL;
		im->scratch_bytes = 0;
	}
	cudaError_t e = cudaMalloc(&im->scratch, want);
	if (e != cudaSuccess && bytes < want) { /* no room for the margin: try the bare need */
		cudaGetLastError();
		want = bytes ? bytes : 1;
		e = cudaMalloc(&im->scratch, want);
	}
	if (e != cudaSuccess) {
		cudaGetLastError();
		im->scratch = NULL;
		mgt_cuda_fail(be, cuda_code(e), "cuda backend: %s: cannot allocate %zu bytes of scratch: %s",
			      op, bytes, cudaGetErrorString(e));
		return NULL;
	}
	im->scratch_bytes = want;
	return im->scratch;
}

/* ---- ops: thin glue to the launchers (attention: cuda_attn.c) ---- */


void mgt_cuda_embedding_fwd(mgt_backend *be, float *y, const int32_t *ids, const float *table,
			     int64_t row0, int64_t rows, int T, int h, bool accumulate)
{
	if (T > 0 && h > 0)
		mgt_cuda_ok(be, "embedding_fwd",
			    mgt_k_embedding_fwd(stream(be), y, ids, table, row0, rows, T, h, accumulate));
}

void mgt_cuda_embedding_bwd(mgt_backend *be, float *dtable, const void *dy, mgt_elem_type dyt, const int32_t *ids,
			     int64_t row0, int64_t rows, int T, int h)
{
	if (T > 0 && h > 0)
		WITH_WS("embedding_bwd", mgt_k_embedding_bwd_ws_bytes(T),
			mgt_k_embedding_bwd(stream(be), dtable, dy, mgt_cuda_kt(dyt), ids, row0, rows, T, h, ws));
}

void mgt_cuda_norm_fwd(mgt_backend *be, mgt_norm_kind kind, void *y, mgt_elem_type yt, float *mean, float *rstd,
			const void *x, mgt_elem_type xt, const float *w, const float *b, int T, int h, float eps)
{
	if (T > 0 && h > 0)
		mgt_cuda_ok(be, "norm_fwd",
			    mgt_k_norm_fwd(stream(be), (int)kind, y, mgt_cuda_kt(yt), mean, rstd, x, mgt_cuda_kt(xt), w, b, T, h,
					   eps));
}

void mgt_cuda_norm_bwd(mgt_backend *be, mgt_norm_kind kind, void *dx, float *dw, float *db, const void *dy,
			mgt_elem_type dyt, const void *x, mgt_elem_type xt, const float *w, const float *mean,
			const float *rstd, int T, int h)
{
	if (T > 0 && h > 0)
		WITH_WS("norm_bwd", mgt_k_norm_bwd_ws_bytes(T, h),
			mgt_k_norm_bwd(stream(be), (int)kind, dx, dw, db, dy, mgt_cuda_kt(dyt), x, mgt_cuda_kt(xt), w, mean, rstd,
				       T, h, ws));
}

void mgt_cuda_head_norm_fwd(mgt_backend *be, mgt_norm_kind kind, void *y, mgt_elem_type yt, float *mean, float *rstd,
			     const float *x, const float *w, const float *b, int T, int ng, int r, int d,
			     bool key, float eps)
{
	if (T > 0 && ng > 0 && d > 0 && (key || r > 0))
		mgt_cuda_ok(be, "head_norm_fwd",
			    mgt_k_head_norm_fwd(stream(be), (int)kind, y, mgt_cuda_kt(yt), mean, rstd, x, w, b, T, ng, r, d,
						key, eps));
}

void mgt_cuda_head_norm_bwd(mgt_backend *be, mgt_norm_kind kind, void *dx, float *dw, float *db, const void *dy,
			    mgt_elem_type gt, const float *x, const float *w, const float *mean, const float *rstd, int T,
			    int ng, int r, int d, bool key)
{
	if (T > 0 && ng > 0 && d > 0 && (key || r > 0))
		WITH_WS("head_norm_bwd", mgt_k_head_norm_bwd_ws_bytes(T, ng, r, d, key),
			mgt_k_head_norm_bwd(stream(be), (int)kind, dx, dw, db, dy, mgt_cuda_kt(gt), x, w, mean, rstd, T,
					    ng, r, d, key, ws));
}

void mgt_cuda_rope(mgt_backend *be, void *qkv, mgt_elem_type qt, const int32_t *pos, const float *inv_freq, int T,
		    int ng, int r, int d, int rot_dim, bool inverse)
{
	if (T > 0 && rot_dim >= 2)
		mgt_cuda_ok(be, "rope",
			    mgt_k_rope(stream(be), qkv, mgt_cuda_kt(qt), pos, inv_freq, T, ng, r, d, rot_dim, inverse));
}

void mgt_cuda_bias_act_fwd(mgt_backend *be, mgt_act_kind act, void *y, mgt_elem_type yt, const void *x,
			    mgt_elem_type xt, const float *b, int T, int f)
{
	if (T > 0 && f > 0)
		mgt_cuda_ok(be, "bias_act_fwd",
			    mgt_k_bias_act_fwd(stream(be), (int)act, y, mgt_cuda_kt(yt), x, mgt_cuda_kt(xt), b, T, f));
}

void mgt_cuda_bias_act_bwd(mgt_backend *be, mgt_act_kind act, void *dx, float *db, const void *dy,
			    mgt_elem_type gt, const void *x, mgt_elem_type xt, const float *b, int T, int f)
{
	if (T > 0 && f > 0)
		WITH_WS("bias_act_bwd", mgt_k_bias_act_bwd_ws_bytes((int)act, T, f),
			mgt_k_bias_act_bwd(stream(be), (int)act, dx, db, dy, mgt_cuda_kt(gt), x, mgt_cuda_kt(xt), b, T, f, ws));
}

void mgt_cuda_bda_fwd(mgt_backend *be, void *out, const void *resid, mgt_elem_type rt, const void *y,
		       mgt_elem_type yt, const float *b, int T, int h, float p, uint64_t key, uint64_t e0)
{
	if (T > 0 && h > 0)
		mgt_cuda_ok(be, "bda_fwd",
			    mgt_k_bda_fwd(stream(be), out, resid, mgt_cuda_kt(rt), y, mgt_cuda_kt(yt), b, T, h, p, key, e0));
}

void mgt_cuda_bda_bwd(mgt_backend *be, void *dy, mgt_elem_type dyt, float *db, const void *dout, mgt_elem_type dot,
		       int T, int h, float p, uint64_t key, uint64_t e0)
{
	if (T > 0 && h > 0)
		WITH_WS("bda_bwd", mgt_k_bda_bwd_ws_bytes(T, h),
			mgt_k_bda_bwd(stream(be), dy, mgt_cuda_kt(dyt), db, dout, mgt_cuda_kt(dot), T, h, p, key, e0, ws));
}

void mgt_cuda_xent_max(mgt_backend *be, float *mx, const void *logits, mgt_elem_type lt, int T, int V)
{
	if (T > 0)
		mgt_cuda_ok(be, "xent_max", mgt_k_xent_max(stream(be), mx, logits, mgt_cuda_kt(lt), T, V));
}

void mgt_cuda_xent_stats(mgt_backend *be, float *sumexp, float *tgt, const void *logits, mgt_elem_type lt,
			  const int32_t *labels, const float *mx, int64_t v0, int T, int V)
{
	if (T > 0)
		mgt_cuda_ok(be, "xent_stats",
			    mgt_k_xent_stats(stream(be), sumexp, tgt, logits, mgt_cuda_kt(lt), labels, mx, v0, T, V));
}

void mgt_cuda_xent_bwd(mgt_backend *be, void *dlogits, const void *logits, mgt_elem_type lt,
			const int32_t *labels, const float *mx, const float *sumexp, const float *mask, float scale,
			int64_t v0, int T, int V)
{
	if (T > 0 && V > 0)
		mgt_cuda_ok(be, "xent_bwd", mgt_k_xent_bwd(stream(be), dlogits, logits, mgt_cuda_kt(lt), labels, mx,
							   sumexp, mask, scale, v0, T, V));
}

/* ---- Mixture of Experts (kernels/moe.cu; the grouped linears are in cuda_gemm.c) ---- */

void mgt_cuda_rows_gather(mgt_backend *be, void *dst, const void *src, mgt_elem_type t, const int32_t *idx, int N,
			   int h)
{
	if (N > 0 && h > 0)
		mgt_cuda_ok(be, "rows_gather", mgt_k_rows_gather(stream(be), dst, src, mgt_cuda_kt(t), idx, N, h));
}

void mgt_cuda_rows_combine(mgt_backend *be, void *dst, const void *src, mgt_elem_type t, const int32_t *slot, int T,
			    int k, int h)
{
	if (T > 0 && h > 0)
		mgt_cuda_ok(be, "rows_combine", mgt_k_rows_combine(stream(be), dst, src, mgt_cuda_kt(t), slot, T, k, h));
}

void mgt_cuda_rows_scale(mgt_backend *be, void *y, const void *x, mgt_elem_type t, const float *w, int N, int f)
{
	if (N > 0 && f > 0)
		mgt_cuda_ok(be, "rows_scale", mgt_k_rows_scale(stream(be), y, x, mgt_cuda_kt(t), w, N, f));
}

void mgt_cuda_rows_dot(mgt_backend *be, float *out, const void *a, const void *b, mgt_elem_type t, int N, int f)
{
	if (N > 0)
		mgt_cuda_ok(be, "rows_dot", mgt_k_rows_dot(stream(be), out, a, b, mgt_cuda_kt(t), N, f));
}

/* The device double a launcher (returning rc) wrote to dres, brought to the host (waits for the
 * stream).  NaN when the backend has failed, now or before. */
static double dres_fetch(mgt_backend *be, const char *op, int rc)
{
	cuda_impl *im = impl(be);
	double r = NAN;
	if (!mgt_cuda_ok(be, op, rc) || im->err != MGT_OK)
		return NAN;
	cudaError_t e = cudaMemcpyAsync(&r, im->dres, sizeof r, cudaMemcpyDeviceToHost, im->stream);
	if (e == cudaSuccess)
		e = cudaStreamSynchronize(im->stream);
	return mgt_cuda_ok(be, op, e) ? r : NAN;
}

double mgt_cuda_xent_loss(mgt_backend *be, float *loss, const float *mx, const float *sumexp,
			   const float *tgt, const float *mask, int T)
{
	if (T <= 0)
		return 0;
	void *ws = mgt_cuda_scratch(be, "xent_loss", mgt_k_xent_loss_ws_bytes(T));
	if (!ws)
		return NAN;
	return dres_fetch(be, "xent_loss", mgt_k_xent_loss(stream(be), impl(be)->dres, loss, mx,
							    sumexp, tgt, mask, T, ws));
}

double mgt_cuda_sumsq(mgt_backend *be, const float *x, size_t n)
{
	if (!n)
		return 0;
	void *ws = mgt_cuda_scratch(be, "sumsq", mgt_k_sumsq_ws_bytes(n));
	if (!ws)
		return NAN;
	return dres_fetch(be, "sumsq", mgt_k_sumsq(stream(be), impl(be)->dres, x, n, ws));
}

/* The scalars exactly as cpu_adamw computes them (double, then fp32). */
void mgt_cuda_adamw(mgt_backend *be, float *p, const float *g, float *m, float *v, size_t n,
		     float lr, float b1, float b2, float eps, float wd, int64_t step)
{
	const double bc1 = 1.0 - pow((double)b1, (double)step);
	const double bc2 = 1.0 - pow((double)b2, (double)step);
	if (n)
		mgt_cuda_ok(be, "adamw",
			    mgt_k_adamw(stream(be), p, g, m, v, n, b1, b2, eps, (float)((double)lr / bc1),
					(float)sqrt(bc2), (float)(1.0 - (double)lr * (double)wd)));
}

/* Device-to-device, queued on the stream (no wait). */
void mgt_cuda_copy(mgt_backend *be, void *dst, const void *src, size_t bytes)
{
	if (bytes)
		mgt_cuda_ok(be, "copy", cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream(be)));
}

void mgt_cuda_scale(mgt_backend *be, float *x, size_t n, float alpha)
{
	if (n)
		mgt_cuda_ok(be, "scale", mgt_k_scale(stream(be), x, n, alpha));
}

void mgt_cuda_add(mgt_backend *be, void *y, const void *x, mgt_elem_type t, size_t n)
{
	if (n)
		mgt_cuda_ok(be, "add", mgt_k_add(stream(be), y, x, mgt_cuda_kt(t), n));
}

void mgt_cuda_cast(mgt_backend *be, void *dst, mgt_elem_type dt, const float *src, size_t n)
{
	if (n)
		mgt_cuda_ok(be, "cast",
			    mgt_k_cast(stream(be), dst, mgt_cuda_kt(dt), src, MGT_K_F32, n));
}

void mgt_cuda_fp8_quantize(mgt_backend *be, uint8_t *q, const void *x, mgt_elem_type xt, size_t n, const float *scale,
			   mgt_fp8_format fmt, float *amax)
{
	void *ws = n ? mgt_cuda_scratch(be, "fp8_quantize", mgt_k_fp8_quantize_ws_bytes()) : NULL;
	if (ws)
		mgt_cuda_ok(be, "fp8_quantize", mgt_k_fp8_quantize(stream(be), q, x, mgt_cuda_kt(xt), n, scale,
								   fmt == MGT_FP8_E5M2, amax, ws));
}

void mgt_cuda_fp8_scale(mgt_backend *be, float *scale, float *scale_inv, const float *amax, float fp8_max)
{
	mgt_cuda_ok(be, "fp8_scale", mgt_k_fp8_scale(stream(be), scale, scale_inv, amax, fp8_max));
}

void mgt_cuda_fp8_transpose(mgt_backend *be, uint8_t *dst, const uint8_t *src, int rows, int cols)
{
	if (rows > 0 && cols > 0)
		mgt_cuda_ok(be, "fp8_transpose", mgt_k_fp8_transpose(stream(be), dst, src, rows, cols));
}

void mgt_cuda_widen(mgt_backend *be, float *dst, const void *src, mgt_elem_type st, size_t n)
{
	if (n)
		mgt_cuda_ok(be, "widen", mgt_k_cast(stream(be), dst, MGT_K_F32, src, mgt_cuda_kt(st), n));
}

/* ---- the Mamba-2 mixer's ops (kernels/mamba.cu, kernels/ssd.cu) ----
 * The kernels are templated on the activations' storage type t (fp32 math, each 16-bit output
 * rounded once), in cpu_mamba16.c's operation order, so results match the CPU's as the fp32 ops
 * do, up to the last rounding. */

void mgt_cuda_mamba_conv_fwd(mgt_backend *be, void *y, const void *x, int ld_x, const float *w, const float *bias,
			     const int32_t *seg_start, int L, int b, int CD, int K, mgt_elem_type t)
{
	mgt_cuda_ok(be, "mamba_conv_fwd",
		    mgt_k_mamba_conv_fwd(stream(be), y, x, ld_x, w, bias, seg_start, L, b, CD, K, mgt_cuda_kt(t)));
}

void mgt_cuda_mamba_conv_bwd(mgt_backend *be, void *dx, float *dw, float *db, const void *dy, const void *x,
			     int ld_x, const float *w, const float *bias, const int32_t *seg_start, int L, int b, int CD,
			     int K, mgt_elem_type t)
{
	if (L > 0 && b > 0 && CD > 0)
		WITH_WS("mamba_conv_bwd", mgt_k_mamba_conv_bwd_ws_bytes(L, b, CD, K),
			mgt_k_mamba_conv_bwd(stream(be), dx, dw, db, dy, x, ld_x, w, bias, seg_start, L, b, CD, K,
					     mgt_cuda_kt(t), ws));
}

/* kernels/ssd.cu's chunks (its Q) are backend.h's, so the saved states' layout is the CPU's. */
_Static_assert(MGT_SSD_CHUNK == 128, "kernels/ssd.cu's chunk length Q is 128");

static mgt_k_ssd k_ssd(const mgt_ssd *d)
{
	return (mgt_k_ssd){ d->L, d->b, d->nh, d->p, d->g, d->n, d->ld_x, d->ld_bc, d->ld_dt, d->seg_start };
}

void mgt_cuda_ssd_scan_fwd(mgt_backend *be, const mgt_ssd *d, void *y, float *states, const void *x, const void *B,
			   const void *C, const void *dt_raw, const float *dt_bias, const float *A_log, const float *D,
			   mgt_elem_type t)
{
	const mgt_k_ssd k = k_ssd(d);
	const size_t bytes = mgt_k_ssd_scan_fwd_ws_bytes(&k);
	if (bytes)
		WITH_WS("ssd_scan_fwd", bytes, mgt_k_ssd_scan_fwd(stream(be), &k, y, states, x, B, C, dt_raw, dt_bias, A_log,
								  D, mgt_cuda_kt(t), ws));
}

void mgt_cuda_ssd_scan_bwd(mgt_backend *be, const mgt_ssd *d, void *dx, void *dB, void *dC, void *ddt_raw,
			   float *ddt_bias, float *dA_log, float *dD, const void *dy, const float *states, const void *x,
			   const void *B, const void *C, const void *dt_raw, const float *dt_bias, const float *A_log,
			   const float *D, mgt_elem_type t)
{
	const mgt_k_ssd k = k_ssd(d);
	const size_t bytes = mgt_k_ssd_scan_bwd_ws_bytes(&k);
	if (bytes)
		WITH_WS("ssd_scan_bwd", bytes, mgt_k_ssd_scan_bwd(stream(be), &k, dx, dB, dC, ddt_raw, ddt_bias, dA_log, dD,
								  dy, states, x, B, C, dt_raw, dt_bias, A_log, D,
								  mgt_cuda_kt(t), ws));
}

void mgt_cuda_mamba_gated_norm_fwd(mgt_backend *be, void *out, float *rstd, const void *y, const void *z, int ld_z,
				   const float *w, int T, int di, int g, float eps, mgt_elem_type t)
{
	mgt_cuda_ok(be, "mamba_gated_norm_fwd",
		    mgt_k_mamba_gated_norm_fwd(stream(be), out, rstd, y, z, ld_z, w, T, di, g, eps, mgt_cuda_kt(t)));
}

void mgt_cuda_mamba_gated_norm_bwd(mgt_backend *be, void *dy, void *dz, float *dw, const void *dout, const void *y,
				   const void *z, int ld_z, const float *w, const float *rstd, int T, int di, int g,
				   mgt_elem_type t)
{
	if (T > 0 && di > 0 && g > 0)
		WITH_WS("mamba_gated_norm_bwd", mgt_k_mamba_gated_norm_bwd_ws_bytes(T, di),
			mgt_k_mamba_gated_norm_bwd(stream(be), dy, dz, dw, dout, y, z, ld_z, w, rstd, T, di, g,
						   mgt_cuda_kt(t), ws));
}

void mgt_cuda_mamba_step(mgt_backend *be, const mgt_ssd *d, int T, float *y, float *u, float *conv_state,
			 float *ssm_state, const float *xbc, int ld, const float *dt_raw, const int32_t *seq,
			 const int32_t *pos, const float *conv_w, const float *conv_b, int K, const float *dt_bias,
			 const float *A_log, const float *D)
{
	const mgt_k_ssd k = k_ssd(d);
	mgt_cuda_ok(be, "mamba_step", mgt_k_mamba_step(stream(be), &k, T, y, u, conv_state, ssm_state, xbc, ld, dt_raw,
						       seq, pos, conv_w, conv_b, K, dt_bias, A_log, D));
}

#define CUDA_OP_ENTRY(ret, n, params) .n = mgt_cuda_##n,
/* the CPU-only ops (backend.h MGT_BACKEND_CPU_ONLY_OPS, empty at present): NULL here,
 * mgt_backend_supports refuses them */
#define CUDA_OP_ABSENT(ret, n, params) .n = NULL,
static const mgt_backend_ops cuda_ops = { .name = "cuda", MGT_BACKEND_OPS_BY(CUDA_OP_ENTRY, CUDA_OP_ABSENT) };

/* ---- create and destroy ---- */

/* Frees whatever part of the state exists (also after a failed create), including allocations
 * the caller did not free. */
void mgt_cuda_destroy(mgt_backend *be)
{
	cuda_impl *im = impl(be);
	if (im) {
		if (im->stream)
			cudaStreamSynchronize(im->stream);
		mgt_cuda_vmm_free_all(be);
		for (size_t i = 0; i < im->cap; i++)
			if (im->slots[i].p && im->slots[i].p != CUDA_TOMB)
				cudaFree(im->slots[i].p);
		mgt_cuda_plans_free(im);
		if (im->lt)
			cublasLtDestroy(im->lt);
		cudaFree(im->lt_ws);
		cudaFree(im->scratch);
		cudaFree(im->dres);
		if (im->stream)
			cudaStreamDestroy(im->stream);
		cudaGetLastError();
		free(im->slots);
		free(im);
	}
	free(be);
}

/* A cudaError_t of create, as the status create returns (the message names the step). */
static mgt_status start_err(mgt_backend *be, const char *step, cudaError_t e)
{
	cudaGetLastError();
	return mgt_err(cuda_code(e), "cuda backend: device %d: %s: %s", impl(be)->device, step,
		       cudaGetErrorString(e));
}

/* Device, stream, cuBLASLt and buffers; then one tiny kernel, so that a GPU the kernels were not
 * built for is refused here rather than at the first op. */
static mgt_status cuda_start(mgt_backend *be)
{
	cuda_impl *im = impl(be);
	cudaError_t e;
	if ((e = cudaSetDevice(im->device)) != cudaSuccess)
		return start_err(be, "cudaSetDevice", e);
	if ((e = cudaStreamCreateWithFlags(&im->stream, cudaStreamNonBlocking)) != cudaSuccess)
		return start_err(be, "cudaStreamCreateWithFlags", e);
	cublasStatus_t s = cublasLtCreate(&im->lt);
	if (s != CUBLAS_STATUS_SUCCESS) {
		im->lt = NULL;
		return mgt_err(MGT_ERR_IO, "cuda backend: device %d: cublasLtCreate: %s", im->device,
			       cublasLtGetStatusString(s));
	}
	if ((e = cudaMalloc(&im->lt_ws, CUDA_LT_WS_BYTES)) != cudaSuccess)
		return start_err(be, "cuBLASLt workspace", e);
	if ((e = cudaMalloc((void **)&im->dres, 2 * sizeof(double))) != cudaSuccess)
		return start_err(be, "result buffer", e);
	if (map_rehash(im) != MGT_OK)
		return MGT_ERR_NOMEM;
	if ((e = cudaMemsetAsync(im->dres, 0, 2 * sizeof(double), im->stream)) != cudaSuccess)
		return start_err(be, "cudaMemsetAsync", e);
	if ((e = (cudaError_t)mgt_k_scale(im->stream, (float *)im->dres, 2, 1.0f)) != cudaSuccess ||
	    (e = cudaStreamSynchronize(im->stream)) != cudaSuccess)
		return start_err(be, "first kernel (is this GPU in the build's CUDA_ARCH?)", e);
	return MGT_OK;
}

mgt_backend *mgt_backend_cuda_create(int device, mgt_status *st)
{
	mgt_status dummy;
	if (!st)
		st = &dummy;
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess) {
		cudaGetLastError();
		bool none = e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver;
		*st = mgt_err(none ? MGT_ERR_USAGE : MGT_ERR_IO, "cuda backend: no usable CUDA device%s: %s",
			      e == cudaErrorInsufficientDriver ? " (no NVIDIA driver, or one too old)" : "",
			      cudaGetErrorString(e));
		return NULL;
	}
	if (device < 0 || device >= n) {
		*st = mgt_err(MGT_ERR_USAGE, "cuda backend: no CUDA device %d (this process sees %d)",
			      device, n);
		return NULL;
	}
	mgt_backend *be = calloc(1, sizeof *be);
	cuda_impl *im = calloc(1, sizeof *im);
	if (!be || !im) {
		free(be);
		free(im);
		*st = mgt_err(MGT_ERR_NOMEM, "cuda backend: out of host memory");
		return NULL;
	}
	im->device = device;
	be->impl = im;
	if ((*st = cuda_start(be)) != MGT_OK) {
		mgt_cuda_destroy(be);
		return NULL;
	}
	be->ops = &cuda_ops;
	be->threads = 1;
	be->precision = MGT_PREC_FP32;
	be->host_memory = false;
	*st = MGT_OK;
	return be;
}

int mgt_backend_cuda_devices(void)
{
	int n = 0;
	if (cudaGetDeviceCount(&n) != cudaSuccess) {
		cudaGetLastError();
		return 0;
	}
	return n;
}

void *mgt_backend_cuda_stream(mgt_backend *be)
{
	return be && be->ops == &cuda_ops ? (void *)impl(be)->stream : NULL;
}

size_t mgt_backend_cuda_mem_available(mgt_backend *be, char *what, size_t n)
{
	size_t free_b = 0, total = 0;
	if (cudaMemGetInfo(&free_b, &total) != cudaSuccess) {
		cudaGetLastError();
		snprintf(what, n, "unknown");
		return SIZE_MAX;
	}
	snprintf(what, n, "cudaMemGetInfo on GPU %d", impl(be)->device);
	return free_b;
}

/* gemm_fp8: the device's compute capability and name from cudaGetDeviceProperties (at each call:
 * callers ask once, when they set up fp8), cuBLASLt's version from cublasLtGetVersion
 * (lib/backend/cuda_lt.c opens the library; 0 when it cannot).  Every other op runs on any device
 * this backend starts on (mgt_backend_supports has checked the op and the type). */
bool mgt_backend_cuda_supports(mgt_backend *be, mgt_backend_op op, mgt_elem_type t, char *why, size_t n)
{
	(void)t;
	if (op != MGT_OP_gemm_fp8)
		return true;
	const int dev = impl(be)->device;
	struct cudaDeviceProp p;
	cudaError_t e = cudaGetDeviceProperties(&p, dev);
	if (e != cudaSuccess) {
		cudaGetLastError();
		snprintf(why, n, "cannot read GPU %d's properties: %s", dev, cudaGetErrorString(e));
		return false;
	}
	if (p.major * 10 + p.minor < 89) {
		snprintf(why, n, "fp8 needs compute capability 8.9 or higher (Ada, Hopper); GPU %d is %s, compute capability %d.%d",
			 dev, p.name, p.major, p.minor);
		return false;
	}
	const size_t v = cublasLtGetVersion();
	if (v < 120103) {
		snprintf(why, n, "fp8 needs cuBLASLt 12.1.3 or later (CUDA 12.1); this one is %zu.%zu.%zu (GPU %d: %s)",
			 v / 10000, v / 100 % 100, v % 100, dev, p.name);
		return false;
	}
	return true;
}
