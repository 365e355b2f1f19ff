/* lib/plan/plan.c: memory (the allocator's sizing, called), time (plan.h's model) and the
 * search over layouts. */
#include "plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/parallel.h"
#include "optim/optim.h"
#include "args/args.h"

/* ---- memory: mgt_model_measure per chunk, mgt-train's schedule, lib/train's optimizer ---- */

/* The bucket size of mgt-train's layout (lib/train/setup.c trainer_chunk_layout): FSDP's units
 * (one a layer) from optim_grads on, else --ddp-bucket-size's default under
 * --overlap-grad-reduce, else one bucket. */
static int64_t bucket_size(const mgt_plan_request *r, const mgt_plan *p)
{
	if (p->sharding >= MGT_DP_OPTIM_GRADS) return MGT_BUCKETS_PER_LAYER;
	return r->overlap_grad_reduce ? mgt_args_ddp_bucket_size(p->dp) : 0;
}

static bool distopt(const mgt_plan *p) { return p->sharding >= MGT_DP_OPTIM; }
/* The ranks a bucket is sharded over: DP x CP, or an instance's DP x CP / instances (mgt-train's
 * trainer_chunk_layout, lib/parallel/parallel.h idp_comm). */
static int shard_dp(const mgt_plan_request *r, const mgt_plan *p)
{
	int g = p->dp * p->cp; /* the gradient group: data x context */
	return distopt(p) && r->instances > 1 ? g / r->instances : g;
}

static mgt_recompute recompute_of(int g)
{
	mgt_recompute rc = { 0 };
	rc.granularity = (mgt_recompute_granularity)g;
	if (g == MGT_RECOMPUTE_FULL) rc.method = MGT_RECOMPUTE_UNIFORM, rc.num_layers = 1;
	return rc;
}

/* Bytes on pipeline rank `rank`: its V chunks as mgt-train creates them (setup.c
 * trainer_chunk_layout, check_memory).  *numel: its flat-buffer elements (all chunks); *outside:
 * those of the units outside layers (FSDP layouts; 0 otherwise); *largest (may be NULL) the
 * elements of its largest bucket. */
static mgt_status rank_memory(const mgt_plan_request *r, const mgt_model_config *c, const mgt_plan *p, int rank,
			      int *slots, mgt_model_mem *mem, double *opt, size_t *numel, size_t *outside, size_t *largest)
{
	mgt_status st = mgt_parallel_sched_slots(p->pp, rank, p->num_microbatches, p->vp, p->pp, slots);
	if (st) return st;
	mgt_parallel ps = { .world_size = p->gpus, .tp = p->tp, .pp = p->pp, .dp = p->dp, .cp = p->cp, .pp_rank = rank };
	memset(mem, 0, sizeof *mem);
	*opt = 0;
	*numel = *outside = 0;
	if (largest) *largest = 0;
	for (int k = 0; k < p->vp; k++) {
		mgt_model_layout L = {
			.mbs = p->mbs, .stage = k * p->pp + rank, .num_stages = p->pp * p->vp, .slots = slots[k],
			.sequence_parallel = p->sp, .distributed_optimizer = distopt(p), .dp = shard_dp(r, p),
			.bucket_size = p->bucket_size, .recompute = p->recompute, .cp_comm = r->cp_comm,
			.precision = r->precision == MGT_PLAN_BF16 ? MGT_PREC_BF16
				     : r->precision == MGT_PLAN_FP16 ? MGT_PREC_FP16 : MGT_PREC_FP32,
			.fp32_residual_connection = r->fp32_residual_connection,
			.fp8 = { .format = r->fp8, .recipe = MGT_FP8_DELAYED, .history_len = 1 },
			.sharding = p->sharding,
		};
		mgt_model_mem x;
		size_t n, o, big;
		st = mgt_model_measure_units(c, &L, &ps, &x, &n, &o, &big);
		if (st) return st;
		if (largest && big > *largest) *largest = big;
		/* --grad-reduce-in-bf16: mgt-train's bf16 copy of the gradient buffer (lib/train/log.c) */
		mem->params += x.params; mem->grads += x.grads + (r->grad_reduce_in_bf16 ? x.grads / 2 : 0);
		mem->activations += x.activations;
		mem->workspace += x.workspace;
		/* lib/train/train.c: AdamW over the buffer, or over this rank's 1/DP shard of every
		 * bucket with the distributed optimizer and FSDP over the data x context group, or an
		 * instance of it (buckets are padded to multiples of its size) */
		*opt += (double)mgt_adamw_bytes(distopt(p) ? n / (size_t)shard_dp(r, p) : n);
		*numel += n;
		*outside += o;
	}
	return MGT_OK;
}

/* The MPI collectives' host scratch as mgt-train counts it (lib/train/log.c trainer_comm_memory):
 * the data x context group's reduce-scatter pack for the largest bucket (`largest` elements,
 * bf16 with --grad-reduce-in-bf16) under the distributed optimizer and FSDP, nothing for its
 * all-reduce (mgt_comm_mpi_pack_bytes); context parallelism's: the ring's sends of a rank's keys
 * and values and of their gradient from copies (p2p, fp32 [s/CP b, groups/TP, 2, d] each), the
 * all-gather's temporaries (allgather), none for a2a.  Bytes. */
static double comm_memory(const mgt_plan_request *r, const mgt_model_config *c, const mgt_plan *p, size_t largest)
{
	double kv = (double)(c->seq_length / p->cp * p->mbs) * (double)(c->num_query_groups / p->tp) * 2 *
		    (double)c->kv_channels * sizeof(float);
	double cp = p->cp <= 1 ? 0 : r->cp_comm == MGT_CP_P2P ? 2 * kv : r->cp_comm == MGT_CP_A2A ? 0
		    : (double)mgt_comm_mpi_scratch_bytes(p->cp);
	int g = shard_dp(r, p);
	double dp = distopt(p) ? (double)mgt_comm_mpi_pack_bytes(g, largest / (size_t)g, r->grad_reduce_in_bf16 ? 2 : sizeof(float)) : 0;
	return dp + cp;
}

static mgt_status plan_memory(const mgt_plan_request *r, const mgt_model_config *c, mgt_plan *p, size_t *numel,
			      size_t *outside)
{
	int *slots = mgt_malloc((size_t)p->vp * sizeof *slots);
	if (!slots) return MGT_ERR_NOMEM;
	mgt_status st = MGT_OK;
	p->mem.total = -1;
	*numel = *outside = 0;
	int ranks[2] = { 0, p->pp - 1 };
	for (int i = 0; !st && i < (p->pp > 1 ? 2 : 1); i++) {
		mgt_model_mem m;
		double opt;
		size_t n, o, big;
		st = rank_memory(r, c, p, ranks[i], slots, &m, &opt, &n, &o, &big);
		if (st) break;
		double comm = r->cluster.host_memory ? comm_memory(r, c, p, big) : 0;
		double total = (double)m.params + (double)m.grads + opt + (double)m.activations + (double)m.workspace +
			       comm + r->cluster.overhead_bytes;
		if (n > *numel) *numel = n, *outside = o;
		if (total <= p->mem.total) continue;
		p->mem.params = (double)m.params; p->mem.grads = (double)m.grads; p->mem.optimizer = opt;
		p->mem.activations = (double)m.activations; p->mem.workspace = (double)m.workspace;
		p->mem.communication = comm;
		p->mem.overhead = r->cluster.overhead_bytes;
		p->mem.total = total;
		p->mem_stage = ranks[i];
	}
	free(slots);
	p->mem.limit = r->cluster.gpu_memory * (1 - r->headroom);
	p->fits = p->mem.total <= p->mem.limit;
	return st;
}

/* ---- time ---- */

typedef struct {
	const mgt_cluster *cl;
	double rate, eb;      /* GEMM rate (FLOP/s), bytes an element */
	double rate8;         /* fp8 GEMM rate of the decoder layers' linears (0: they run at rate) */
	double peak;          /* dense peak for attention (FLOP/s) */
	double bw;            /* memory bandwidth (bytes/s) */
} hw;

/* One GEMM [m, k] x [k, n]: compute at the GEMM rate plus its operands' and result's traffic. */
static double gemm(const hw *w, double m, double n, double k)
{
	return 2 * m * n * k / w->rate + (m * k + k * n + m * n) * w->eb / w->bw;
}

/* A linear layer of T tokens, in -> out: forward; backward = data gradient + weight gradient.
 * The weight gradient accumulates into the fp32 main gradient (Megatron's
 * gradient_accumulation_fusion: the GEMM reads and writes C in fp32, 8 bytes an element, in
 * place of writing eb). */
static void linear(const hw *w, double T, double in, double out, double *f, double *b)
{
	*f += gemm(w, T, out, in);
	*b += gemm(w, T, in, out) + gemm(w, out, in, T) + out * in * (8 - w->eb) / w->bw;
}

/* The fp8 GEMM of a decoder layer's linear: 1-byte A and B, the result written in eb bytes, or
 * (wgrad) accumulated into the fp32 main gradient (read and write 4 bytes). */
static double gemm8(const hw *w, double m, double n, double k, double cb)
{
	return 2 * m * n * k / w->rate8 + (m * k + k * n + m * n * cb) / w->bw;
}

/* A decoder layer's linear in fp8 (lib/model/fp8lin.c): the forward casts its input (read eb,
 * write a byte; the weight's cast on the first micro-batch is left out) and runs the GEMM; the
 * backward casts dy, makes the transposed copies of dy and of the saved input (a byte read and
 * one written an element) and runs dgrad and wgrad. */
static void linear8(const hw *w, double T, double in, double out, double *f, double *b)
{
	*f += gemm8(w, T, out, in, w->eb) + T * in * (w->eb + 1) / w->bw;
	*b += gemm8(w, T, in, out, w->eb) + gemm8(w, out, in, T, 8) + (T * out * (w->eb + 1) + 2 * T * out + 2 * T * in) / w->bw;
}

/* One of the decoder layer's linears: fp8 when the plan asks for it, else linear(). */
static void dlinear(const hw *w, double T, double in, double out, double *f, double *b)
{
	if (w->rate8 > 0) linear8(w, T, in, out, f, b);
	else linear(w, T, in, out, f, b);
}

/* One ring collective step set (all-gather or reduce-scatter) of S bytes over n ranks. */
static double ring(double S, int n, double bw, double lat)
{
	return n > 1 ? (double)(n - 1) / n * S / bw + (n - 1) * lat : 0;
}

/* A layer's times (seconds) and the bytes it sends over the context group: cp_bytes forward and
 * backward, cp_fwd_bytes forward (what full recomputation sends again), cp_sel_bytes core
 * attention's forward exchange (what selective recomputation sends again: mgt-train recomputes
 * the ring's, all-gather's and all-to-all's forward with core attention). */
typedef struct {
	double fwd, bwd, recomp, tp_exposed, attn_fwd, cp_exposed, cp_bytes, cp_fwd_bytes, cp_sel_bytes;
} layer_time;

/* The gradient group's size: data x context parallelism. */
static int dpcp(const mgt_plan *p) { return p->dp * p->cp; }

/* Context parallelism's exchanges of one layer and micro-batch: bf and bb bytes a rank sends
 * forward and backward in nf and nb collective steps over the context group (its ranks TP apart in
 * Megatron's tp-cp-ep-dp-pp order: within a node when TP x CP GPUs fit in one), under passes of
 * hf and hb seconds (the attention block's; < 0: nothing hides them, as the all-to-alls, which
 * the compute waits for), each leaving at least 1/CP of itself exposed.  Adds the exposed time to
 * lt's fwd, bwd and cp_exposed, the bytes to cp_bytes. */
static void cp_exchange(const mgt_plan_request *r, const mgt_plan *p, double bf, double bb, double nf, double nb,
			double hf, double hb, layer_time *lt)
{
	const mgt_cluster *cl = &r->cluster;
	bool intra = (int64_t)p->tp * p->cp <= cl->gpus_per_node;
	double bw = (intra ? cl->intra_bandwidth : cl->inter_bandwidth) * 1e9;
	double lat = (intra ? cl->intra_latency : cl->inter_latency) * 1e-6;
	double tf = bf / bw + nf * lat, tb = bb / bw + nb * lat, last = 1.0 / p->cp;
	double xf = hf < 0 ? tf : fmax(tf - hf, tf * last), xb = hb < 0 ? tb : fmax(tb - hb, tb * last);
	lt->fwd += xf;
	lt->bwd += xb;
	lt->cp_exposed += xf + xb;
	lt->cp_bytes += bf + bb;
	lt->cp_fwd_bytes += bf;
}

/* Tensor parallelism's exposed time and the launches of nb blocks (a dense layer's attention and
 * MLP are 2; a hybrid model's symbol 1): per block, with SP 1 all-gather + 1 reduce-scatter
 * forward and 1 + 1 backward plus the all-gather Megatron repeats for the weight gradients;
 * without SP an all-reduce each way (2 ring passes each); under --tp-comm-overlap (with SP)
 * the collectives run under the GEMMs they feed (gf, gb).  Kernels a block launches: 6 forward
 * (Megatron-Core with Transformer Engine: a layer's norm, QKV GEMM, RoPE, attention, projection
 * GEMM, bias-dropout-add, norm, fc1 GEMM, activation, fc2 GEMM, bias-dropout-add and one for
 * casts and bookkeeping = 12), the backward twice that; fp8 adds casts and transposes. */
static void block_overheads(const mgt_plan_request *r, const mgt_plan *p, const hw *w, double T, double h, int nb,
			    double gf, double gb, layer_time *lt)
{
	const mgt_cluster *cl = &r->cluster;
	int t = p->tp;
	double S = T * h * w->eb, lat = (t <= cl->gpus_per_node ? cl->intra_latency : cl->inter_latency) * 1e-6;
	double bwl = (t <= cl->gpus_per_node ? cl->intra_bandwidth : cl->inter_bandwidth) * 1e9;
	double one = ring(S, t, bwl, lat);
	double cf = t > 1 ? 2 * nb * one : 0, cb = t > 1 ? (p->sp ? 3 : 2) * nb * one : 0;
	bool ov = r->tp_comm_overlap && p->sp;
	double xf = ov ? fmax(0, cf - gf) : cf, xb = ov ? fmax(0, cb - gb) : cb;
	double kf = 6 * nb * cl->kernel_overhead * 1e-6, kb = 12 * nb * cl->kernel_overhead * 1e-6;
	if (w->rate8 > 0) kf += 2 * nb * cl->kernel_overhead * 1e-6, kb += 6 * nb * cl->kernel_overhead * 1e-6;
	lt->fwd += xf; /* in the order the sums always took */
	lt->fwd += kf;
	lt->bwd += xb;
	lt->bwd += kb;
	lt->tp_exposed = xf + xb;
}

/* A decoder layer's attention block and (or) MLP block for one micro-batch on one GPU (both: a
 * GPT layer; one: a hybrid model's '*' or '-' symbol); ffn: the MLP's size over TP. */
static layer_time blocks(const mgt_plan_request *r, const mgt_model_config *c, const mgt_plan *p, const hw *w, bool attn,
			 bool mlp, double ffn)
{
	const mgt_cluster *cl = &r->cluster;
	int t = p->tp;
	double s = (double)c->seq_length, T = s * p->mbs / p->cp, h = (double)c->hidden_size, d = (double)c->kv_channels;
	double nq = (double)c->num_attention_heads / t, ng = (double)c->num_query_groups / t;
	double fc1 = c->swiglu ? 2 * ffn : ffn;
	double gf = 0, gb = 0;
	if (attn) {
		dlinear(w, T, h, (nq + 2 * ng) * d, &gf, &gb);  /* linear_qkv */
		dlinear(w, T, nq * d, h, &gf, &gb);             /* linear_proj */
	}
	if (mlp) {
		dlinear(w, T, h, fc1, &gf, &gb);                /* linear_fc1 */
		dlinear(w, T, ffn, h, &gf, &gb);                /* linear_fc2 */
	}
	/* causal flash attention: Megatron's FLOPs (mgt_model_flops), forward 2 s^2 nq d per sequence,
	 * 1/CP of them on each context rank (the load-balanced zigzag chunks) */
	double af = attn ? 2 * p->mbs * s * s * nq * d / p->cp : 0, at_f = af / (w->peak * cl->attention_fwd_efficiency);
	double at_b = 2 * af / (w->peak * cl->attention_bwd_efficiency);
	/* element-wise traffic a token, forward (elements): a norm (read, write h) and a
	 * bias-dropout-add (read x and the residual, write the sum, a 1-byte mask: 3.5 h) a block =
	 * 5.5 h, split over TP by sequence parallelism only; the activation (read fc1, write ffn);
	 * RoPE (read and write q and k).  The backward moves twice as much. */
	double seq = 5.5 * (attn + mlp) * h / (p->sp ? t : 1), act = mlp ? fc1 + ffn : 0;
	double rope = !attn || strcmp(c->position_embedding_type, "rope") ? 0 : 2 * (nq + ng) * d * c->rotary_percent;
	double ef = T * (seq + act + rope) * w->eb / w->bw, eb = 2 * ef;
	layer_time lt = { .fwd = gf + at_f + ef, .bwd = gb + at_b + eb, .attn_fwd = at_f };
	block_overheads(r, p, w, T, h, attn + mlp, gf, gb, &lt);
	double cpf = lt.fwd; /* the forward before attention's exchange: what it adds is recomputed */
	if (attn && p->cp > 1) {
		/* tests/cli/comm_volume.py's per-layer volume: kv (ring or all-gather) in the training
		 * precision, their gradient in fp32; a2a: qkv and the output forward, again and their
		 * gradients backward */
		double k = p->cp, B4 = T * ng * 2 * d * 4, B = B4 * w->eb / 4;
		double Q = T * (nq + 2 * ng) * d * w->eb, O = T * nq * d * w->eb;
		if (r->cp_comm == MGT_CP_A2A)
			cp_exchange(r, p, (k - 1) / k * (Q + O), (k - 1) / k * 2 * (Q + O), 2 * (k - 1), 4 * (k - 1), -1, -1, &lt);
		else if (r->cp_comm == MGT_CP_ALLGATHER)
			cp_exchange(r, p, (k - 1) * B, (k - 1) * (B + B4), k - 1, 2 * (k - 1), at_f, at_b, &lt);
		else
			cp_exchange(r, p, (k - 1) * B, (k - 1) * B + k * B4, k - 1, 2 * k - 1, at_f, at_b, &lt);
		lt.cp_sel_bytes = lt.cp_fwd_bytes;
	}
	if (p->recompute.granularity == MGT_RECOMPUTE_SELECTIVE) lt.recomp = at_f + (lt.fwd - cpf);
	return lt;
}

/* One decoder layer (attention and MLP) for one micro-batch on one GPU. */
static layer_time layer(const mgt_plan_request *r, const mgt_model_config *c, const mgt_plan *p, const hw *w)
{
	return blocks(r, c, p, w, true, true, (double)c->ffn_hidden_size / p->tp);
}

/* A Mamba-2 layer (lib/model/layer_mamba.c) for one micro-batch on one GPU: in_proj and out_proj;
 * the chunked scan's FLOPs (Megatron's 7 T d_in N, d_in this rank's) at the GEMM rate, its
 * backward twice; the mixer's traffic a token (in_proj's output read by the conv, the scan, the
 * gated norm: w + 3 cd + 4 di elements) plus the norm and bias-dropout-add's 5.5 h, all in the
 * activations' type (eb bytes: the mixer stores them in 16 bits under bf16/fp16, layer_mamba.c);
 * the backward twice that; one block's tensor parallelism and launches.  Under context
 * parallelism T is the rank's s / CP tokens a sequence (the scan then runs the whole sequence of
 * 1/CP of the heads: the same work), and the two all-to-alls each way move, of each of the CP - 1
 * other ranks' blocks of T tokens, x, B, C and dt of its heads and groups out and y back, and
 * backward dy out and dx, dB, dC, ddt back (lib/model/mamba_cp.c, tests/cli/comm_volume.py; with
 * fewer groups than context ranks one group a block, replicated: Megatron's
 * mamba_context_parallel.py group_repeat_count), exposed: the conv and scan wait for them. */
static layer_time mamba_layer(const mgt_plan_request *r, const mgt_model_config *c, const mgt_plan *p, const hw *w)
{
	int t = p->tp;
	double T = (double)c->seq_length * p->mbs / p->cp, h = (double)c->hidden_size, N = (double)c->mamba_state_dim;
	double nh = (double)c->mamba_num_heads / t, G = (double)c->mamba_num_groups / t, di = nh * (double)c->mamba_head_dim;
	double cd = di + 2 * G * N, wl = di + cd + nh;
	double gf = 0, gb = 0;
	dlinear(w, T, h, wl, &gf, &gb);   /* in_proj */
	dlinear(w, T, di, h, &gf, &gb);   /* out_proj */
	double sf = 7 * T * di * N / w->rate;
	double ef = T * (wl + 3 * cd + 4 * di + 5.5 * h / (p->sp ? t : 1)) * w->eb / w->bw;
	layer_time lt = { .fwd = gf + sf + ef, .bwd = gb + 2 * sf + 2 * ef };
	block_overheads(r, p, w, T, h, 1, gf, gb, &lt);
	if (p->cp > 1) {
		double k = p->cp, nb = nh / k, P = (double)c->mamba_head_dim, gb_ = G >= k ? G / k : 1;
		double one = (k - 1) * T * ((nb * P + 2 * gb_ * N + nb) + nb * P) * w->eb;
		cp_exchange(r, p, one, one, 2 * (k - 1), 2 * (k - 1), -1, -1, &lt);
	}
	return lt;
}

/* The times of a hybrid model's symbols: by MGT_LAYER_* (an MoE layer as an MLP of its top-k
 * experts' and shared expert's width; with --moe-latent-size the experts' width counts latent / h
 * of itself, and the latent projections, whole on every TP rank, as an MLP of the latent width). */
typedef struct {
	layer_time attn, mlp, moe, mamba;
} symbol_times;

static symbol_times symbols(const mgt_plan_request *r, const mgt_model_config *c, const mgt_plan *p, const hw *w)
{
	double lat = (double)c->moe_latent_size, routed = (double)(c->moe_ffn_hidden_size * c->moe_router_topk);
	if (lat > 0) routed *= lat / (double)c->hidden_size;
	double moe = (routed + (double)c->moe_shared_expert_intermediate_size) / p->tp + lat;
	return (symbol_times){ blocks(r, c, p, w, true, false, 0), blocks(r, c, p, w, false, true, (double)c->ffn_hidden_size / p->tp),
			       blocks(r, c, p, w, false, true, moe), mamba_layer(r, c, p, w) };
}

/* Layer l's time: a GPT layer's, or the hybrid symbol's. */
static const layer_time *layer_of(const mgt_model_config *c, const layer_time *lt, const symbol_times *sy, int64_t l)
{
	switch (mgt_hybrid_symbol(c, l)) {
	case MGT_LAYER_ATTENTION: return &sy->attn;
	case MGT_LAYER_MLP: return &sy->mlp;
	case MGT_LAYER_MOE: return &sy->moe;
	case MGT_LAYER_MAMBA: return &sy->mamba;
	default: return lt;
	}
}

/* The forward + backward (+ recompute) of one micro-batch through virtual stage `stage`. */
static double stage_time(const mgt_plan_request *r, const mgt_model_config *c, const mgt_plan *p, const hw *w,
			 int stage, const layer_time *lt, const symbol_times *sy, double *fwd, double *bwd, double *rec,
			 double *tpx, double *cpx, double *cpb)
{
	int64_t first, n;
	if (mgt_stage_layers(c, p->pp * p->vp, stage, &first, &n)) n = 0;
	double f = (double)n * lt->fwd, b = (double)n * lt->bwd, rc = (double)n * lt->recomp;
	double x = (double)n * lt->tp_exposed, cx = (double)n * lt->cp_exposed, cb = (double)n * lt->cp_bytes;
	int64_t k = p->recompute.method == MGT_RECOMPUTE_BLOCK ? (p->recompute.num_layers < n ? p->recompute.num_layers : n) : n;
	bool full = p->recompute.granularity == MGT_RECOMPUTE_FULL, sel = p->recompute.granularity == MGT_RECOMPUTE_SELECTIVE;
	if (full) rc = (double)k * lt->fwd;
	/* recomputation sends the recomputed forwards' context exchanges again */
	cb += full ? (double)k * lt->cp_fwd_bytes : sel ? (double)n * lt->cp_sel_bytes : 0;
	if (c->hybrid_layer_pattern[0]) { /* symbol by symbol */
		f = b = rc = x = cx = cb = 0;
		for (int64_t l = first; l < first + n; l++) {
			const layer_time *y = layer_of(c, lt, sy, l);
			f += y->fwd, b += y->bwd, x += y->tp_exposed, cx += y->cp_exposed, cb += y->cp_bytes;
			rc += full ? (l < first + k ? y->fwd : 0) : y->recomp;
			cb += full ? (l < first + k ? y->cp_fwd_bytes : 0) : sel ? y->cp_sel_bytes : 0;
		}
	}
	double T = (double)c->seq_length * p->mbs / p->cp, h = (double)c->hidden_size, t = p->tp;
	double V = (double)c->padded_vocab_size / t;
	const mgt_cluster *cl = &r->cluster;
	double one = t > 1 ? ring(T * h * w->eb, p->tp, cl->intra_bandwidth * 1e9, cl->intra_latency * 1e-6) : 0;
	if (stage == 0) { /* embedding lookup (read the rows, write [T, h]) and its gradient */
		f += 2 * T * h * w->eb / w->bw + one;
		b += 2 * T * h * w->eb / w->bw + one;
		x += 2 * one;
	}
	if (stage == p->pp * p->vp - 1) { /* final norm, output layer, fused cross entropy */
		double gf = 0, gb = 0;
		linear(w, T, h, V, &gf, &gb);
		f += gf + T * V * w->eb / w->bw + 2 * T * h * w->eb / w->bw + one;
		b += gb + 2 * T * V * w->eb / w->bw + 4 * T * h * w->eb / w->bw + one;
		x += 2 * one;
	}
	*fwd += f; *bwd += b; *rec += rc; *tpx += x; *cpx += cx; *cpb += cb;
	return f + b + rc;
}

/* A collective of t seconds on the link while a pass of `pass` seconds runs: what the pass does
 * not hide, at least its last unit's share (the fraction `last`). */
static double exposed(double t, double pass, double last)
{
	return t > 0 ? fmax(t - pass, t * last) : 0;
}

/* Megatron-FSDP's data-parallel traffic (tests/cli/comm_volume.py; megatron-checkpoints-fsdp.md
 * B5), ring collectives of fp32 over the data-parallel group: with optim_grads a reduce-scatter
 * of the buffer's N elements after every micro-batch's backward and an all-gather of the
 * parameters after the step; with optim_grads_params besides, every micro-batch, an all-gather
 * of the layer units (N - outside elements) before the forward and another before the backward,
 * and after the step an all-gather of the units outside layers only.  Exposed as the
 * distributed optimizer's traffic is (plan_time): under --overlap-grad-reduce the reduce-scatter,
 * and under --overlap-param-gather the backward's gather, behind the micro-batch's backward
 * (with its recomputation), the forward's gather behind its forward, each leaving at least the
 * last unit's share (the average layer unit: 1 / the rank's layers); the step's gather as the
 * distributed optimizer's.  Seconds per iteration. */
static double fsdp_time(const mgt_plan_request *r, const mgt_model_config *c, const mgt_plan *p, double N,
			double outside, double bus, double lat, double wf, double wbr)
{
	double layers = (double)c->num_layers / p->pp, u = 1 / (layers > 1 ? layers : 1);
	int G = dpcp(p);
	double rs = ring(4 * N, G, bus, lat), hb = r->overlap_grad_reduce ? rs : 0;
	bool ogp = p->sharding >= MGT_DP_OPTIM_GRADS_PARAMS;
	double gl = ogp ? ring(4 * (N - outside), G, bus, lat) : 0, hf = 0;
	if (r->overlap_param_gather) hf = gl, hb += gl;
	double mb = exposed(hb, wbr, u) + (rs + 2 * gl - hb - hf) + exposed(hf, wf, u);
	double step = ring(4 * (ogp ? outside : N), G, bus, lat);
	return (double)p->num_microbatches * mb + (r->overlap_param_gather ? exposed(step, wf, u) : step);
}

static void plan_time(const mgt_plan_request *r, const mgt_model_config *c, mgt_plan *p, size_t numel, size_t outside)
{
	const mgt_cluster *cl = &r->cluster;
	bool fp32 = r->precision == MGT_PLAN_FP32;
	double e = cl->efficiency;
	hw w = { .cl = cl, .rate = (fp32 ? cl->fp32_tflops : cl->gemm_tflops) * 1e12 * e, .eb = fp32 ? 4 : 2,
		 .rate8 = r->fp8 != MGT_FP8_OFF ? mgt_plan_fp8_tflops(cl) * 1e12 * e : 0,
		 .peak = (fp32 ? cl->fp32_tflops : cl->peak_tflops) * 1e12 * e, .bw = cl->memory_bandwidth * 1e9 * e };
	layer_time lt = layer(r, c, p, &w);
	symbol_times sy = symbols(r, c, p, &w);
	int P = p->pp, V = p->vp, M = p->num_microbatches;
	double T = (double)c->seq_length * p->mbs / p->cp, h = (double)c->hidden_size;
	/* point-to-point: [s/CP b h] (/TP under SP) each way per micro-batch; the next stage is
	 * TP x CP x DP ranks on (Megatron's tp-cp-ep-dp-pp order): the same node only when the whole
	 * job is */
	bool pp_intra = (int64_t)p->tp * p->cp * p->dp * p->pp <= cl->gpus_per_node;
	double p2p = P > 1 ? T * h * w.eb / (p->sp ? p->tp : 1) / ((pp_intra ? cl->intra_bandwidth : cl->inter_bandwidth) * 1e9) +
				     (pp_intra ? cl->intra_latency : cl->inter_latency) * 1e-6 : 0;
	double worst = 0, wf = 0, wb = 0, wr = 0, wx = 0, wc = 0, wcb = 0;
	int cand[3] = { 0, P - 1, P > 2 ? 1 : 0 };
	for (int i = 0; i < 3; i++) {
		double f = 0, b = 0, rc = 0, x = 0, cx = 0, cb = 0, tot = 0;
		for (int k = 0; k < V; k++)
			tot += stage_time(r, c, p, &w, k * P + cand[i], &lt, &sy, &f, &b, &rc, &x, &cx, &cb);
		/* the 1F1B schedule waits for each send; the interleaved one overlaps them (Megatron's
		 * overlap_p2p_comm, on with virtual stages) */
		if (V == 1) tot += 2 * p2p;
		if (tot > worst) worst = tot, wf = f, wb = b, wr = rc, wx = x, wc = cx, wcb = cb;
	}
	p->time.compute = (double)M * (wf + wb - wx - wc);
	p->time.cp_comm = (double)M * wc;
	p->cp_bytes = (double)M * wcb;
	p->time.recompute = (double)M * wr;
	p->time.tp_comm = (double)M * wx;
	p->time.pp_comm = V == 1 ? (double)M * 2 * p2p : 0;
	p->time.bubble = (double)(P - 1) / V * worst;
	double pipe = (double)M * worst + p->time.bubble;
	/* data parallelism: fp32 gradients (Megatron reduces bf16/fp16 runs' gradients in fp32;
	 * bf16 ones with --grad-reduce-in-bf16); the distributed optimizer's parameter all-gather
	 * moves mgt's fp32 parameters (lib/train/train.c dp_bucket: Megatron's moves them in the
	 * training precision) */
	double dp_t = 0, N = (double)numel, gb = r->grad_reduce_in_bf16 ? 2 : 4;
	int G = dpcp(p); /* the gradient group (data x context), its ranks TP apart */
	if (G > 1) {
		bool span = (int64_t)p->tp * G > cl->gpus_per_node;
		int k = p->tp < cl->gpus_per_node ? cl->gpus_per_node / p->tp : 1;
		double bus = span ? fmin(cl->intra_bandwidth, k * cl->inter_bandwidth) : cl->intra_bandwidth;
		double lat = (span ? cl->inter_latency : cl->intra_latency) * 1e-6;
		double rs = ring(gb * N, G, bus * 1e9, lat);
		double ag = distopt(p) ? ring(4 * N, G, bus * 1e9, lat) : rs; /* all-reduce: RS + AG */
		double last = p->bucket_size > 0 && (double)p->bucket_size < N ? (double)p->bucket_size / N : 1;
		double grad = rs + (distopt(p) ? 0 : ag), gather = distopt(p) ? ag : 0;
		double xg = r->overlap_grad_reduce ? fmax(grad - wb - wr, grad * last) : grad;
		double xp = distopt(p) && r->overlap_param_gather ? fmax(gather - wf, gather * last) : gather;
		dp_t = p->sharding >= MGT_DP_OPTIM_GRADS ? fsdp_time(r, c, p, N, (double)outside, bus * 1e9, lat, wf, wb + wr)
							 : xg + xp;
	}
	p->time.dp_comm = dp_t;
	/* the optimizer: fp32 parameter, gradient, two moments read and written, the parameter
	 * written in the training precision, the gradient norm and zeroing: 36 + eb bytes an element */
	double shard = distopt(p) ? N / G : N;
	p->time.optimizer = shard * (36 + w.eb) / w.bw;
	p->time.iteration = pipe + dp_t + p->time.optimizer;
	p->model_flops = mgt_model_flops(c, r->global_batch_size);
	p->tflops_per_gpu = p->model_flops / p->time.iteration / p->gpus / 1e12;
	p->mfu = p->tflops_per_gpu / cl->peak_tflops;
}

/* ---- one layout ---- */

static mgt_status finalize(const mgt_plan_request *r, int tp, mgt_model_config *c)
{
	*c = r->model;
	return mgt_model_config_finalize(c, tp);
}

static mgt_status check_divides(const mgt_plan_request *r, const mgt_model_config *c, mgt_plan *p)
{
	int gpus = r->cluster.gpus_per_node * r->cluster.nodes;
	p->cp = r->cp > 1 ? r->cp : 1;
	if (p->tp < 1 || p->pp < 1 || p->vp < 1 || p->mbs < 1) return mgt_err(MGT_ERR_USAGE, "layout sizes must be positive");
	if (gpus % (p->tp * p->pp * p->cp))
		return mgt_err(MGT_ERR_USAGE, "%d GPUs are not divisible by --tensor-model-parallel-size %d x "
			       "--pipeline-model-parallel-size %d x --context-parallel-size %d", gpus, p->tp, p->pp, p->cp);
	if (c->seq_length % (2 * p->cp))
		return mgt_err(MGT_ERR_USAGE, "--seq-length %lld is not divisible by 2 x --context-parallel-size %d "
			       "(each sequence is cut into 2 x CP chunks)", (long long)c->seq_length, p->cp);
	p->gpus = gpus;
	p->dp = gpus / (p->tp * p->pp * p->cp);
	if (r->global_batch_size % ((int64_t)p->mbs * p->dp))
		return mgt_err(MGT_ERR_USAGE, "--global-batch-size %lld is not a multiple of --micro-batch-size %d x "
			       "data-parallel size %d", (long long)r->global_batch_size, p->mbs, p->dp);
	p->num_microbatches = (int)(r->global_batch_size / ((int64_t)p->mbs * p->dp));
	if (c->num_layers % ((int64_t)p->pp * p->vp))
		return mgt_err(MGT_ERR_USAGE, "--num-layers %lld is not divisible by --pipeline-model-parallel-size %d x "
			       "%d virtual stages", (long long)c->num_layers, p->pp, p->vp);
	if (p->vp > 1 && p->pp < 2)
		return mgt_err(MGT_ERR_USAGE, "virtual pipeline stages need --pipeline-model-parallel-size > 1");
	if (p->tp == 1) p->sp = false;
	/* with one gradient rank (DP x CP 1) the distributed optimizer is none; an FSDP strategy given
	 * stays (mgt-train's layout) */
	if (dpcp(p) == 1 && p->sharding == MGT_DP_OPTIM) p->sharding = MGT_DP_NO_SHARD;
	if (r->instances > 1 && (dpcp(p) % r->instances || !distopt(p)))
		return mgt_err(MGT_ERR_USAGE, "--num-distributed-optimizer-instances %d: data-parallel size %d%s", r->instances,
			       dpcp(p), dpcp(p) % r->instances ? " is not divisible by it" : " without the distributed optimizer");
	p->bucket_size = bucket_size(r, p);
	return MGT_OK;
}

static mgt_status evaluate(const mgt_plan_request *r, const mgt_model_config *c, mgt_plan *p, bool memory)
{
	mgt_status st = check_divides(r, c, p);
	size_t numel = 0, outside = 0;
	if (!st && memory) st = plan_memory(r, c, p, &numel, &outside);
	if (st) return st;
	if (!memory) { /* the parameters of the first stage, for the DP model: from the table */
		int *slots = mgt_malloc((size_t)p->vp * sizeof *slots);
		mgt_model_mem m;
		double opt;
		if (!slots) return MGT_ERR_NOMEM;
		st = rank_memory(r, c, p, 0, slots, &m, &opt, &numel, &outside, NULL);
		free(slots);
		if (st) return st;
	}
	plan_time(r, c, p, numel, outside);
	return MGT_OK;
}

mgt_status mgt_plan_evaluate(const mgt_plan_request *r, mgt_plan *p)
{
	mgt_model_config c;
	mgt_status st = finalize(r, p->tp, &c);
	return st ? st : evaluate(r, &c, p, true);
}

/* ---- the search ---- */

static int gran_list(int want, int *out)
{
	if (want >= 0) { out[0] = want; return 1; }
	out[0] = MGT_RECOMPUTE_NONE; out[1] = MGT_RECOMPUTE_SELECTIVE; out[2] = MGT_RECOMPUTE_FULL;
	return 3;
}

static int bool_list(int want, bool possible, bool *out)
{
	if (!possible) { out[0] = false; return 1; }
	if (want >= 0) { out[0] = want; return 1; }
	out[0] = true; out[1] = false;
	return 2;
}

/* The data-parallel strategies to try (mgt-plan(1) "Data-parallel sharding"): the one given
 * (--use-megatron-fsdp with --data-parallel-sharding-strategy), the distributed optimizer's
 * choice given (--[no-]use-distributed-optimizer: optim or no_shard alone), none at DP 1, else
 * all four less what mgt-train refuses (check_sharding: optim_grads and optim_grads_params with
 * --grad-reduce-in-bf16). */
static int sharding_list(const mgt_plan_request *r, int dp, mgt_dp_sharding *out)
{
	int n = 0;
	if (r->sharding >= 0) out[n++] = (mgt_dp_sharding)r->sharding;
	else if (dp < 2 || r->distopt == 0) out[n++] = MGT_DP_NO_SHARD;
	else if (r->distopt == 1) out[n++] = MGT_DP_OPTIM;
	else {
		out[n++] = MGT_DP_OPTIM;
		if (r->instances <= 1) out[n++] = MGT_DP_NO_SHARD; /* instances shard */
		if (!r->grad_reduce_in_bf16) out[n++] = MGT_DP_OPTIM_GRADS;
		if (!r->grad_reduce_in_bf16) out[n++] = MGT_DP_OPTIM_GRADS_PARAMS;
	}
	return n;
}

/* Better: faster; then without FSDP (optim_grads, optim_grads_params: a run that does not need
 * them keeps Megatron's usual DDP); then less memory. */
static bool better(const mgt_plan *a, const mgt_plan *b)
{
	if (a->time.iteration != b->time.iteration) return a->time.iteration < b->time.iteration;
	bool fa = a->sharding >= MGT_DP_OPTIM_GRADS, fb = b->sharding >= MGT_DP_OPTIM_GRADS;
	if (fa != fb) return fb;
	return a->mem.total < b->mem.total;
}

typedef struct {
	mgt_plan *best;
	int n, cap;
	mgt_plan smallest;   /* the least memory seen, for the message when nothing fits */
	bool any;
	int64_t candidates, fitting;
} search;

static mgt_status search_run(const mgt_plan_request *r, search *s)
{
	const mgt_cluster *cl = &r->cluster;
	int gpus = cl->gpus_per_node * cl->nodes;
	int max_tp = r->max_tp > 0 ? r->max_tp : cl->gpus_per_node;
	int64_t L = r->model.num_layers;
	int max_pp = r->max_pp > 0 ? r->max_pp : (int)L, max_mbs = r->max_mbs > 0 ? r->max_mbs : 16;
	for (int tp = 1; tp <= (r->tp ? r->tp : max_tp); tp++) {
		if (r->tp ? tp != r->tp : gpus % tp != 0) continue;
		mgt_model_config c;
		if (finalize(r, tp, &c)) continue; /* heads, groups or ffn do not divide */
		for (int pp = 1; pp <= (r->pp ? r->pp : max_pp); pp++) {
			int cp = r->cp > 1 ? r->cp : 1;
			if ((r->pp && pp != r->pp) || L % pp || gpus % (tp * pp * cp)) continue;
			int dp = gpus / (tp * pp * cp);
			int mbl[16], nm = 0;
			if (r->mbs) mbl[nm++] = r->mbs;
			else for (int m = 1; m <= max_mbs && nm < 16; m *= 2) mbl[nm++] = m;
			for (int im = 0; im < nm; im++) {
				int mbs = mbl[im];
				if (r->global_batch_size % ((int64_t)mbs * dp)) continue;
				int M = (int)(r->global_batch_size / ((int64_t)mbs * dp));
				for (int vp = 1; vp <= L / pp; vp++) {
					if ((r->vp && vp != r->vp) || (L / pp) % vp || (vp > 1 && pp < 2)) continue;
					if (vp > 1 && (M < pp || (M % pp && M % pp < pp))) continue; /* sched_check with G = PP */
					bool sps[2];
					mgt_dp_sharding dos[4];
					int grs[3], nsp = bool_list(r->sp, tp > 1, sps), ndo = sharding_list(r, dp * cp, dos);
					int ngr = gran_list(r->recompute, grs);
					for (int a = 0; a < nsp; a++)
						for (int b = 0; b < ndo; b++)
							for (int g = 0; g < ngr; g++) {
								mgt_plan p = { .tp = tp, .pp = pp, .vp = vp, .mbs = mbs, .sp = sps[a],
									       .sharding = dos[b], .recompute = recompute_of(grs[g]) };
								mgt_status st = evaluate(r, &c, &p, true);
								if (st == MGT_ERR_NOMEM) return st;
								if (st) continue;
								s->candidates++;
								if (!s->any || p.mem.total < s->smallest.mem.total) s->smallest = p, s->any = true;
								if (!p.fits && !r->ignore_memory) continue;
								s->fitting++;
								int i;
								if (s->n < s->cap) i = s->n++;
								else if (better(&p, &s->best[s->cap - 1])) i = s->cap - 1;
								else continue;
								s->best[i] = p;
								for (; i > 0 && better(&s->best[i], &s->best[i - 1]); i--) {
									mgt_plan t = s->best[i];
									s->best[i] = s->best[i - 1];
									s->best[i - 1] = t;
								}
							}
				}
			}
		}
	}
	return MGT_OK;
}

static mgt_status check_request(const mgt_plan_request *r)
{
	const mgt_cluster *cl = &r->cluster;
	if (r->global_batch_size < 1) return mgt_err(MGT_ERR_USAGE, "--global-batch-size must be given and positive");
	if (r->tp && r->max_tp && r->tp > r->max_tp)
		return mgt_err(MGT_ERR_USAGE, "--tensor-model-parallel-size %d exceeds --max-tensor-model-parallel-size %d",
			       r->tp, r->max_tp);
	if (r->pp && r->max_pp && r->pp > r->max_pp)
		return mgt_err(MGT_ERR_USAGE, "--pipeline-model-parallel-size %d exceeds --max-pipeline-model-parallel-size %d",
			       r->pp, r->max_pp);
	if (r->tp == 1 && r->sp == 1)
		return mgt_err(MGT_ERR_USAGE, "--sequence-parallel needs --tensor-model-parallel-size > 1");
	if (r->vp > 1 && r->pp == 1)
		return mgt_err(MGT_ERR_USAGE, "virtual pipeline stages need --pipeline-model-parallel-size > 1");
	if (r->headroom < 0 || r->headroom >= 1) return mgt_err(MGT_ERR_USAGE, "--memory-headroom %g: expected [0, 1)", r->headroom);
	if (r->tp && r->tp > cl->gpus_per_node * cl->nodes)
		return mgt_err(MGT_ERR_USAGE, "--tensor-model-parallel-size %d exceeds the cluster's %d GPUs", r->tp,
			       cl->gpus_per_node * cl->nodes);
	if (r->tp) { /* the message of mgt_model_config_finalize names what does not divide */
		mgt_model_config c;
		mgt_status st = finalize(r, r->tp, &c);
		if (st) return st;
	}
	return MGT_OK;
}

static mgt_status run(const mgt_plan_request *r, search *s)
{
	memset(s, 0, sizeof *s);
	s->cap = r->top > 0 ? r->top : 10;
	if (!(s->best = mgt_malloc((size_t)s->cap * sizeof *s->best))) return MGT_ERR_NOMEM;
	mgt_status st = search_run(r, s);
	if (st) free(s->best), s->best = NULL;
	return st;
}

static const char *sharding_text(mgt_dp_sharding s)
{
	return s == MGT_DP_OPTIM ? ", distributed optimizer" : s == MGT_DP_OPTIM_GRADS ? ", FSDP optim_grads"
	       : s == MGT_DP_OPTIM_GRADS_PARAMS ? ", FSDP optim_grads_params" : "";
}

mgt_status mgt_plan_search(const mgt_plan_request *r, mgt_plan **plans, int *n, mgt_plan_stats *stats, char *why,
			   size_t why_n)
{
	*plans = NULL;
	*n = 0;
	if (why && why_n) why[0] = 0;
	mgt_status st = check_request(r);
	if (st) return st;
	double t0 = mgt_now();
	search s;
	if ((st = run(r, &s))) return st;
	if (stats) *stats = (mgt_plan_stats){ .candidates = s.candidates, .fitting = s.fitting, .seconds = mgt_now() - t0 };
	if (!s.candidates) {
		free(s.best);
		int gpus = r->cluster.gpus_per_node * r->cluster.nodes;
		return mgt_err(MGT_ERR_USAGE, "no layout of %d GPUs divides: TP x PP x DP must equal the GPUs, the layers "
			       "(%lld) divide by PP (x virtual stages), --global-batch-size %lld by micro-batch size x DP, and the "
			       "heads, query groups and FFN by TP (within the constraints given)", gpus,
			       (long long)r->model.num_layers, (long long)r->global_batch_size);
	}
	if (!s.n && why && why_n) {
		const mgt_plan *p = &s.smallest;
		double g = 1024.0 * 1024.0 * 1024.0;
		snprintf(why, why_n, "the layout needing least memory (TP %d, PP %d, %d virtual, DP %d, micro-batch %d, "
			 "recompute %s%s%s) needs %.2f GiB on pipeline rank %d (parameters %.2f, gradients %.2f, optimizer "
			 "%.2f, activations %.2f, workspace %.2f, overhead %.2f) but a GPU has %.2f GiB (headroom %.0f%%)",
			 p->tp, p->pp, p->vp, p->dp, p->mbs,
			 p->recompute.granularity == MGT_RECOMPUTE_FULL ? "full" : p->recompute.granularity ? "selective" : "none",
			 p->sp ? ", sequence parallel" : "", sharding_text(p->sharding), p->mem.total / g,
			 p->mem_stage, p->mem.params / g, p->mem.grads / g, p->mem.optimizer / g, p->mem.activations / g,
			 p->mem.workspace / g, p->mem.overhead / g, r->cluster.gpu_memory / g, 100 * r->headroom);
	}
	*plans = s.best;
	*n = s.n;
	if (!s.n) free(s.best), *plans = NULL;
	return MGT_OK;
}

mgt_status mgt_plan_smallest_cluster(const mgt_plan_request *r, int *nodes)
{
	*nodes = 0;
	mgt_plan_request q = *r;
	q.top = 1;
	for (int k = r->cluster.nodes * 2; (int64_t)k * r->cluster.gpus_per_node <= 65536; k *= 2) {
		q.cluster.nodes = k;
		search s;
		mgt_status st = run(&q, &s);
		if (st) return st;
		free(s.best);
		if (s.n) {
			*nodes = k;
			return MGT_OK;
		}
	}
	return MGT_OK;
}

/* ---- mgt-train's flags ---- */

char **mgt_plan_train_args(const mgt_plan_request *r, const mgt_plan *p)
{
	char w[40][512];
	int n = 0;
#define ADD(...) snprintf(w[n++], sizeof w[0], __VA_ARGS__)
	if (r->model_arg) {
		ADD("--model"); ADD("%s", r->model_arg);
	}
	if (r->vocab_arg) {
		ADD("--vocab-size"); ADD("%lld", (long long)r->vocab_arg);
	}
	ADD("--tensor-model-parallel-size"); ADD("%d", p->tp);
	ADD("--pipeline-model-parallel-size"); ADD("%d", p->pp);
	if (p->cp > 1) {
		ADD("--context-parallel-size"); ADD("%d", p->cp);
		ADD("--cp-comm-type");
		ADD(r->cp_comm == MGT_CP_A2A ? "a2a" : r->cp_comm == MGT_CP_ALLGATHER ? "allgather" : "p2p");
	}
	if (p->vp > 1) {
		ADD("--num-layers-per-virtual-pipeline-stage");
		ADD("%lld", (long long)(r->model.num_layers / ((int64_t)p->pp * p->vp)));
	}
	ADD("--micro-batch-size"); ADD("%d", p->mbs);
	ADD("--global-batch-size"); ADD("%lld", (long long)r->global_batch_size);
	ADD("--seq-length"); ADD("%lld", (long long)r->model.seq_length);
	if (p->sp) ADD("--sequence-parallel");
	if (p->sharding == MGT_DP_OPTIM) ADD("--use-distributed-optimizer");
	if (r->instances > 1) {
		ADD("--num-distributed-optimizer-instances"); ADD("%d", r->instances);
	}
	if (p->sharding >= MGT_DP_OPTIM_GRADS) {
		ADD("--use-megatron-fsdp");
		ADD("--data-parallel-sharding-strategy"); ADD("%s", mgt_args_sharding_name(p->sharding));
	}
	if (r->overlap_grad_reduce) ADD("--overlap-grad-reduce");
	if (r->precision == MGT_PLAN_BF16) ADD("--bf16");
	if (r->precision == MGT_PLAN_FP16) ADD("--fp16");
	if (r->fp8 != MGT_FP8_OFF) {
		ADD("--fp8-format");
		ADD(r->fp8 == MGT_FP8_FMT_HYBRID ? "hybrid" : "e4m3");
	}
	if (r->fp32_residual_connection && r->precision != MGT_PLAN_FP32) ADD("--fp32-residual-connection");
	if (r->grad_reduce_in_bf16) ADD("--grad-reduce-in-bf16");
	if (p->recompute.granularity == MGT_RECOMPUTE_SELECTIVE) {
		ADD("--recompute-granularity"); ADD("selective");
	} else if (p->recompute.granularity == MGT_RECOMPUTE_FULL) {
		ADD("--recompute-granularity"); ADD("full");
		ADD("--recompute-method"); ADD(p->recompute.method == MGT_RECOMPUTE_BLOCK ? "block" : "uniform");
		ADD("--recompute-num-layers"); ADD("%d", p->recompute.num_layers);
	}
#undef ADD
	size_t bytes = (size_t)(n + 1) * sizeof(char *);
	for (int i = 0; i < n; i++) bytes += strlen(w[i]) + 1;
	char **out = mgt_malloc(bytes);
	if (!out) return NULL;
	char *q = (char *)(out + n + 1);
	for (int i = 0; i < n; i++) {
		out[i] = q;
		strcpy(q, w[i]);
		q += strlen(w[i]) + 1;
	}
	out[n] = NULL;
	return out;
}

double mgt_plan_fp8_tflops(const mgt_cluster *c)
{
	return c->fp8_gemm_tflops > 0 ? c->fp8_gemm_tflops : c->host_memory ? c->gemm_tflops : 0;
}
