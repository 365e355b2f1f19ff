"""Analytic communication volume of one mgt-train iteration, per rank, against --comm-log.

Usage: comm_volume.py PRESET.json PREFIX NP key=value...   (keys: tp pp vp sp distopt mbs gbs seq
vocab (padded) divisible cp cpcomm (p2p, allgather or a2a) groups (query groups, overriding the
preset's) prec (fp32, bf16 or fp16: the training precision; dense models) fp32res (1: with
--fp32-residual-connection) gradbf16 (1: with --grad-reduce-in-bf16, or
--megatron-fsdp-grad-comm-dtype bf16 or fp16: the gradients' reductions in 2-byte elements) pattern (--hybrid-layer-pattern,
overriding the preset's) mgroups (--mamba-num-groups, overriding the preset's) fp8 (delayed or tensorwise:
--fp8-format with that --fp8-recipe; every layer's four linears) fp8pg (1: with --fp8-param-gather))

Independent of mgt's C code: the tensor list is written here from megatron/core/transformer/transformer_layer.py
(TE names, shard rules), the gradient buffer layout from section 10, and the bytes per operation
from lib/parallel/parallel.h's ring convention (allreduce 2(p-1)/p*B, reduce-scatter and all-gather
(p-1)*B per rank's part, send B).  What mgt communicates per micro-batch (section 8's table):
  no SP: all-reduce of [T,h] after the embedding, after linear_proj and linear_fc2 (forward),
         for the inputs of linear_qkv, linear_fc1 and the output layer (backward);
         3 all-reduces of [T] in the vocab-parallel cross-entropy (max, sum-exp, target logit)
  SP:    reduce-scatter / all-gather of [T,h] in place of those, plus an all-gather before each
         norm output is used and its reduce-scatter in backward; all-reduce of the gradients of
         TP-replicated tensors once per iteration.  With bf16 or fp16 every [T,h] operation of
         the decoder layers and the output layer moves 2-byte elements (mgt-train(1), Precision:
         the norm outputs, the row-parallel outputs and the activation gradients of the [T,h]
         stream are stored in 16 bits), the embedding's forward reduction 4-byte ones
  PP:    the [T/sp, h] activation forward and its gradient backward between adjacent stages (in
         2-byte elements with bf16 or fp16, unless fp32res=1: mgt-train(1), Precision, the
         residual stream and its gradient)
  tied embeddings with PP > 1: all-reduce of the word-embedding gradient, first <-> last stage
  DP:    per bucket an all-reduce, or reduce-scatter + all-gather with the distributed optimizer,
         over the data group, or with CP > 1 the data x context group ("data-context"); the
         gradients in 2-byte elements with gradbf16=1, the parameters' all-gather in 4-byte ones
  CP:    per layer and micro-batch, with B the bytes of a rank's keys and values
         [seq/CP * mbs, groups/TP, 2, d] (2-byte elements with bf16 or fp16) and B4 those of
         their gradient (fp32): p2p (ring) (CP-1) B forward, (CP-1) B + CP B4 backward (the keys
         and values again, and their gradient one hop further); allgather (CP-1) B forward,
         (CP-1) B + (CP-1) B4 backward (all-gather again, reduce-scatter of the gradient); a2a
         (2-byte elements with bf16 or fp16),
         with Q and O the bytes of a rank's qkv [seq/CP * mbs, (heads + 2 groups)/TP, d] and
         attention output [seq/CP * mbs, heads/TP, d]: (CP-1)/CP (Q + O) forward, (CP-1)/CP (2Q + 2O)
         backward (qkv and the output again, the output's gradient, the qkv's gradient back)
  norm:  one double all-reduced over the model-parallel group (over the world with distopt)
  loss:  5 doubles all-reduced over the world (loss sum, tokens, interrupt, out-of-time and
         async-save-pending flags)
Hybrid models (preset "family": "hybrid"; megatron/core/models/hybrid/hybrid_layer_specs.py
hybrid_stack_spec): the layers are the symbols of the pattern, each one layer: M a Mamba-2 layer
(MambaLayer: its norm fused into the mixer's in_proj), * an attention layer (a TransformerLayer
with self_attention alone: input norm fused into linear_qkv, linear_proj), - an MLP layer (MLPLayer:
pre-MLP norm fused into linear_fc1, linear_fc2); '|' ends a pipeline stage's segment (stage s holds
segment s; without '|' the layers split evenly as for dense models).  E (MoE) is not modelled (nor
are a dense model's MoE layers): exit 2.  No position embedding, final norm decoder.final_norm.
  tensors: a Mamba layer's, in megatron/core/ssm/mamba_mixer.py MambaMixer.__init__'s order, local
         to a TP rank (nh = heads, g = groups, n = state, P = head dim, di = nh P, all but h / TP;
         d_conv 4; no biases: the mixer asserts not bias): in_proj.layer_norm_weight [h] (TE
         registers the fused norm before the weight; TP-replicated; its bias with LayerNorm),
         in_proj.weight [2 di + 2 g n + nh, h], conv1d weight [di + 2 g n, 1, 4] and bias
         [di + 2 g n], dt_bias [nh], A_log [nh], D [nh], norm.weight [di] (all partition_dim 0),
         out_proj.weight [h, di]
  TP:    a layer of each kind is one sublayer: its column-parallel input (linear_qkv, linear_fc1,
         in_proj) and row-parallel output (linear_proj, linear_fc2, out_proj) move [T,h] as a dense
         layer's attention or MLP half does (no SP: 2 all-reduces; SP: 4 parts); the mixer's
         gated norm is per group, within a TP rank (no communication)
  CP:    attention layers as above; per Mamba layer and micro-batch two all-to-alls forward and two
         backward over the context group, in the activations' type (2-byte elements with bf16 or
         fp16; lib/model/mamba_cp.c: z stays on the ranks
         that hold the tokens; x, B, C and dt go to the ranks of their heads, y comes back; the
         backward moves dy out and dx, dB, dC, ddt back).  Block q of the cp blocks holds nh/cp
         heads and g' = g/cp groups, or with fewer groups than context ranks one group replicated
         on cp/g ranks (megatron/core/ssm/mamba_context_parallel.py: group_repeat_count, B and C
         repeated before the all-to-all).  A rank sends cp - 1 of its cp blocks of T tokens:
         (cp-1) T (nh/cp P + 2 g' n + nh/cp) x es for x, B, C, dt and (cp-1) T nh/cp P x es for
         y, the same backward (es = 2 with bf16 or fp16, else 4).  (Megatron's pre_conv_ssm moves
         z as well, and post_conv_ssm returns the gated y: (cp-1)/cp T di x es more each way than
         mgt.)
FSDP (key fsdp: og for --data-parallel-sharding-strategy optim_grads, ogp for optim_grads_params;
megatron_fsdp.md and the checkpoints-FSDP notes, B5): the gradient buffer in units, a bucket per
decoder layer (the tensors outside layers a unit at each end of a stage), each padded to a
multiple of G x 1024 elements.  Per unit of n elements, with f(n) = (G-1) n/G x 4 bytes a
rank's reduce-scatter or all-gather part: og moves M f(n) (a reduce-scatter after every
micro-batch's backward) + f(n) (the parameters' all-gather after the step); ogp moves M f(n) of
gradients and, for a layer unit, 2 M f(n) of fp32 parameters (gathered before each micro-batch's
forward and again before its backward; mgt gathers the fp32 main parameters, 4 bytes), for a
unit outside layers f(n) after the step.  Optimizer state is sharded as distopt's.
fp8 (Transformer Engine's delayed scaling, lib/model/fp8lin.c): after every micro-batch's forward
and backward the recorded amaxes (3 forward and 2 backward slots a linear, fp32) are all-reduced
with MAX over TP and over the data x context group; tensorwise scaling reduces none of them
there, but with --fp8-param-gather the weights' amaxes (3 slots a linear) once a step.  Under
sequence parallelism the norm outputs that feed the fp8 linear_qkv and linear_fc1 are gathered
in fp32 (their cast reads fp32), the other [T,h] operations as without fp8.
--fp8-param-gather (fp8pg=1; Megatron's fp8 model weights, B5's w = 1 byte): every parameter
all-gather -- the distributed optimizer's after the step, FSDP's per layer unit -- moves each
rank's packed shard: 1 byte an fp8 weight element (linear_qkv, linear_proj, linear_fc1,
linear_fc2; a Mamba layer's in_proj and out_proj), 4 for every other element (norms, biases,
embeddings: mgt gathers them as fp32), the padding between tensors left out, the largest rank's
rounded up to 4 bytes, (G-1) of them per rank.
Distributed-optimizer instances (key inst: --num-distributed-optimizer-instances N with distopt;
megatron/core/parallel_state.py, param_and_grad_buffer.py start_grad_sync): the gradient group
of G ranks is cut into N instances of I = G/N; buckets are padded to lcm(I, 128) (the buffer's
group is the intra-instance one) and each is reduce-scattered and its parameters all-gathered
over the instance ("data-intra": (I-1) n/I x 4 bytes each), and the owned shard of n/I elements
all-reduced across the instances ("data-inter": 2 (N-1)/N n/I x 4 bytes, in the gradients'
element size); the gradient norm's double goes over the instance's W/N ranks ("instance")
instead of the world; the data group itself moves nothing.  With fsdp=og|ogp (Megatron-FSDP's
HSDP, outer no_shard) the units are padded to I x 1024 and the FSDP volume above is over the
instance (G replaced by I), plus the one all-reduce of each unit's shard across the instances
(in the last micro-batch's backward: outer_fsdp_group_grad_reduce).
Exit 1 (with a diff) when any rank's logged bytes differ from the analytic ones.
"""
import json, math, sys

cfg = json.load(open(sys.argv[1]))
prefix, W = sys.argv[2], int(sys.argv[3])
kv = dict(x.split("=") for a in sys.argv[4:] for x in a.split(","))
tp, pp = int(kv.get("tp", 1)), int(kv.get("pp", 1))
V = int(kv.get("vp", 1))
sp = kv.get("sp", "0") == "1" and tp > 1
fsdp = kv.get("fsdp", "")
fp8 = kv.get("fp8", "")  # delayed or tensorwise: --fp8-format's linears (dense GPT layers)
fp8pg = kv.get("fp8pg", "0") == "1"  # --fp8-param-gather
distopt = kv.get("distopt", "0") == "1" or fsdp != ""
bucket_size = int(kv.get("bucket", 0))
first_n, last_n = int(kv.get("first", 0)), int(kv.get("last", 0))  # uneven pipeline stages
mbs, gbs, seq = int(kv["mbs"]), int(kv["gbs"]), int(kv["seq"])
Vp = int(kv["vocab"])
cp, cpcomm = int(kv.get("cp", 1)), kv.get("cpcomm", "p2p")
lowp = kv.get("prec", "fp32") in ("bf16", "fp16")
# the residual stream (the hidden states between stages) and its gradient in 16 bits unless
# fp32res=1 (--fp32-residual-connection)
hid_es = 4 if not lowp or kv.get("fp32res", "0") == "1" else 2
act_es = 2 if lowp else 4  # the [T,h] activations and gradients that TP moves
grad_es = 2 if kv.get("gradbf16", "0") == "1" else 4  # the data-parallel gradient reduction
dp = W // (tp * pp * cp)
M = gbs // (mbs * dp)
G = dp * cp  # the gradient group
inst = int(kv.get("inst", 1))  # distributed-optimizer instances
assert inst == 1 or (distopt and G % inst == 0), (inst, G)
I = G // inst  # the ranks a bucket is sharded over: an instance's

L, h = cfg["num_layers"], cfg["hidden_size"]
# a hybrid model's pattern: its symbols are the layers, '|' splits the pipeline stages
hybrid = cfg.get("family") == "hybrid"
pattern = kv.get("pattern", cfg.get("hybrid_layer_pattern", "")) if hybrid else ""
segments = pattern.split("|")
if hybrid:
    L = len(pattern) - pattern.count("|")
    if "E" in pattern:
        print(f"comm_volume.py: pattern {pattern}: MoE layers (E) are not modelled", file=sys.stderr)
        sys.exit(2)
    assert set(pattern) <= set("M*-|"), pattern
# the Mamba-2 mixer (megatron/core/ssm/mamba_mixer.py: d_inner 2 h, heads d_inner / head dim)
m_P, m_N = cfg.get("mamba_head_dim", 64), cfg.get("mamba_state_dim", 128)
m_G = int(kv.get("mgroups", cfg.get("mamba_num_groups", 8)))
m_NH = cfg.get("mamba_num_heads") or 2 * h // m_P
m_DI = m_NH * m_P
nq = cfg["num_attention_heads"]
ng = cfg.get("num_query_groups", nq) if cfg.get("group_query_attention") else nq
ng = int(kv.get("groups", ng))
d = cfg.get("kv_channels", h // nq)
swiglu = cfg.get("swiglu", False)
ffn = cfg.get("ffn_hidden_size") or (int(4 * h * 2 / 3 / 64) * 64 if swiglu else 4 * h)
ln = cfg.get("normalization", "LayerNorm") == "LayerNorm"
bias = cfg.get("add_bias_linear", True)
qkv_bias = bias or cfg.get("add_qkv_bias", False)
tied = not cfg.get("untie_embeddings_and_output_weights", False)
learned = cfg.get("position_embedding_type", "learned_absolute") == "learned_absolute"
maxpos = cfg.get("max_position_embeddings", seq)

T = seq // cp * mbs
S = P = None


def stage_layers(stage, nstages):
    """Megatron's placement: first_n / last_n layers on the first / last stage (when given),
    the rest evenly over the others; a hybrid pattern with '|': segment `stage`."""
    if len(segments) > 1:
        assert len(segments) == nstages, (pattern, nstages)
        lo = sum(len(x) for x in segments[:stage])
        return range(lo, lo + len(segments[stage]))
    counts = [0] * nstages
    ends = [i for i, n in ((0, first_n), (nstages - 1, last_n)) if n]
    for i in ends: counts[i] = first_n if i == 0 else last_n
    others = [i for i in range(nstages) if i not in ends]
    per = (L - sum(counts)) // len(others)
    for i in others: counts[i] = per
    lo = sum(counts[:stage])
    return range(lo, lo + counts[stage])


def symbols(l):
    """The sublayers of layer l: a dense layer's attention and MLP, or its pattern symbol."""
    return pattern.replace("|", "")[l] if hybrid else "*-"


def tensors(stage, nstages):
    """(name, local numel, replicated over TP) in table order for one chunk."""
    first, last = stage == 0, stage == nstages - 1
    out = []
    layer = -1
    def add(name, numel, rep=False):
        out.append((name, numel, rep, layer))
    if first or (last and tied):
        add("word_emb", Vp // tp * h)
    if first and learned:
        add("pos_emb", maxpos * h, True)
    for l in stage_layers(stage, nstages):
        layer = l
        for sym in symbols(l):
            if sym == "*":
                # Megatron-Core's order: linear_proj is built before linear_qkv (Attention.__init__)
                add("proj_w", h * (nq * d // tp))
                if bias: add("proj_b", h, True)
                add("ln1_w", h, True)
                if ln: add("ln1_b", h, True)
                qkv = (nq + 2 * ng) * d
                add("qkv_w", qkv // tp * h)
                if qkv_bias: add("qkv_b", qkv // tp)
            elif sym == "-":
                add("ln2_w", h, True)
                if ln: add("ln2_b", h, True)
                fc1 = 2 * ffn if swiglu else ffn
                add("fc1_w", fc1 // tp * h)
                if bias: add("fc1_b", fc1 // tp)
                add("fc2_w", h * (ffn // tp))
                if bias: add("fc2_b", h, True)
            else:  # M: MambaMixer.__init__'s order (header)
                nh, g, di = m_NH // tp, m_G // tp, m_DI // tp
                add("m_ln_w", h, True)
                if ln: add("m_ln_b", h, True)
                add("in_proj_w", (2 * di + 2 * g * m_N + nh) * h)
                add("conv1d_w", (di + 2 * g * m_N) * 4)
                add("conv1d_b", di + 2 * g * m_N)
                add("dt_bias", nh)
                add("A_log", nh)
                add("D", nh)
                add("m_norm_w", di)
                add("out_proj_w", h * di)
    layer = -1
    if last:
        add("final_ln_w", h, True)
        if ln: add("final_ln_b", h, True)
        if not tied: add("output_w", Vp // tp * h)
    return out


def buckets(ts, shared):
    """The buckets of the flat gradient buffer (megatron/core/distributed/param_and_grad_buffer.py): one bucket
    unless --ddp-bucket-size or the shared embedding splits it; each (elements, unit, offset, its
    tensors as (name, start, end) in the flat buffer)."""
    pad = I * 1024 if fsdp in ("og", "ogp") else I * 128 // math.gcd(I, 128) if distopt else 1
    up = lambda x, m: (x + m - 1) // m * m
    res, start, bstart, prev, held = [], 0, 0, None, []
    def close(end):
        nonlocal start, bstart, held
        if end == bstart: return
        e = up(end, pad)
        res.append((e - bstart, unit, bstart, held))
        start, bstart, held = e, e, []
    unit = -1
    for name, n, _, layer in reversed(ts):
        sh = shared and name == "word_emb"
        if distopt: start = up(start, 64)
        if sh or (fsdp in ("og", "ogp") and prev is not None and layer != prev): close(start)
        prev = unit = layer
        end = start + n
        held.append((name, start, end))
        if sh or (bucket_size and end - bstart >= bucket_size): close(end)
        else: start = end
    close(start)
    return res


FP8_WEIGHTS = ("qkv_w", "proj_w", "fc1_w", "fc2_w", "in_proj_w", "out_proj_w")


def packed(nb, off, held):
    """--fp8-param-gather's bytes of a rank's packed shard of a bucket (lib/model/fp8lin.c, pack):
    its elements tensor by tensor, an fp8 linear's weight 1 byte each, any other 4, the padding
    between tensors left out; the largest rank's, rounded up to 4 (the all-gather moves int32s)."""
    most = 0
    for r in range(I):
        lo, hi = off + r * (nb // I), off + (r + 1) * (nb // I)
        most = max(most, sum(max(0, min(hi, e) - max(lo, a)) * (1 if name in FP8_WEIGHTS else 4)
                             for name, a, e in held))
    return (most + 3) // 4 * 4


def ar(n, p, es=4): return 0.0 if p == 1 else 2.0 * (p - 1) / p * n * es
def part(n, p, es=4): return 0.0 if p == 1 else (p - 1) * n * float(es)  # RS / AG, n = per-rank part


def expected(tp_rank, pp_rank):
    e = dict(tensor=0.0, data=0.0, pipeline=0.0, embedding=0.0, model=0.0, world=0.0)
    if cp > 1: e.update({"context": 0.0, "data-context": 0.0})
    grad = "data-context" if cp > 1 else "data"
    if inst > 1:
        e.update({"data-intra": 0.0, "data-inter": 0.0, "instance": 0.0})
        grad = "data-intra"
    B4 = T * (ng // tp) * 2 * d * 4.0  # the keys and values' gradient: fp32
    B = B4 * act_es / 4  # the keys and values: 16-bit with bf16 or fp16
    Q, O = T * (nq + 2 * ng) // tp * d * act_es, T * nq // tp * d * act_es
    per_layer = {"p2p": (cp - 1) * B + (cp - 1) * B + cp * B4, "allgather": 2 * (cp - 1) * B + (cp - 1) * B4,
                 "a2a": (cp - 1) / cp * 3 * (Q + O)}[cpcomm]
    # a Mamba layer's two all-to-alls forward and two backward (header): a block of heads
    nh_b, g_l = m_NH // tp // cp, m_G // tp
    g_b = g_l // cp if g_l >= cp else 1  # fewer groups than context ranks: one, replicated
    mamba_a2a = 2 * (cp - 1) * T * ((nh_b * m_P + 2 * g_b * m_N + nh_b) + nh_b * m_P) * float(act_es)
    Th = T // tp if sp else T
    ns = pp * V
    for c in range(V):
        stage = c * pp + pp_rank
        first, last = stage == 0, stage == ns - 1
        ts = tensors(stage, ns)
        subs = "".join(symbols(l) for l in stage_layers(stage, ns))
        nl = len(subs)  # sublayers: each moves [T,h] as half a dense layer
        if tp > 1:
            if sp:  # per sublayer: a norm-output gather and a reduce-scatter forward, a gather
                # and a reduce-scatter backward; the embedding's reduce-scatter (fp32) and its
                # gradient's gather; the final norm's gather and the output layer's dx
                X, Xa = part(Th * h, tp), part(Th * h, tp, act_es)
                mb = nl * 4 * Xa + ((X + Xa) if first else 0) + ((2 * Xa + 3 * ar(T, tp)) if last else 0)
                # fp8: the norm outputs feeding linear_qkv and linear_fc1 are gathered in fp32, the
                # type their cast reads (lib/model/sublayer.c mgt_sublayer_norm_dst)
                if fp8: mb += nl * (X - Xa)
                e["tensor"] += sum(ar(n, tp) for _, n, rep, _ in ts if rep)
            else:
                A, Aa = ar(T * h, tp), ar(T * h, tp, act_es)  # per sublayer: 1 forward, 1 backward
                mb = 2 * nl * Aa + (A if first else 0) + ((Aa + 3 * ar(T, tp)) if last else 0)
            e["tensor"] += M * mb
        e["pipeline"] += M * ((0 if last else Th * h * hid_es) + (0 if first else Th * h * hid_es))
        if tied and pp > 1 and (first or last):
            e["embedding"] += ar(Vp // tp * h, 2)
        for nb, unit, off, held in buckets(ts, tied and pp > 1):
            f, fg = part(nb // I, I), part(nb // I, I, grad_es)
            ag = (I - 1) * packed(nb, off, held) if fp8pg else f  # a parameter all-gather
            if inst > 1: e["data-inter"] += ar(nb // I, inst, grad_es)
            if fsdp == "og": e[grad] += M * fg + ag
            elif fsdp == "ogp": e[grad] += M * fg + (2 * M * ag if unit >= 0 else ag)
            else: e[grad] += fg + ag if distopt else ar(nb, G, grad_es)
        # fp8 (delayed scaling): after each micro-batch's forward and backward the amaxes of the
        # chunk's 3 and 2 slots a linear reduced over TP and data x context; tensorwise with
        # --fp8-param-gather: the weight slots' amaxes (all 3 a linear) once a step
        nlin = 4 * len(stage_layers(stage, ns)) if fp8 else 0
        for g, n in (("tensor", tp), (grad, G)):
            if fp8 == "delayed": e[g] += M * (ar(3 * nlin, n) + ar(2 * nlin, n))
            if fp8 == "tensorwise" and fp8pg and g == grad: e[g] += ar(3 * nlin, n)
        if cp > 1: e["context"] += M * (subs.count("*") * per_layer + subs.count("M") * mamba_a2a)
    if distopt and inst > 1: e["instance"] += ar(1, W // inst, 8)
    elif distopt: e["world"] += ar(1, W, 8)
    else: e["model"] += ar(1, tp * pp, 8)
    e["world"] += ar(5, W, 8)
    return e


bad = 0
for r in range(W):
    rows = [json.loads(l) for l in open(f"{prefix}.rank{r}.jsonl")]
    if not rows:
        print(f"rank {r}: no iterations logged"); bad += 1; continue
    ex = expected(rows[0]["tp_rank"], rows[0]["pp_rank"])
    for row in rows:
        for k, v in ex.items():
            got = row["bytes"][k]
            if abs(got - v) > 1e-9 * max(1.0, v):
                print(f"rank {r} iteration {row['iteration']} {k}: logged {got!r}, analytic {v!r}")
                bad += 1
    if r == 0 or bad:
        print(f"# rank {r}: " + ", ".join(f"{k} {v:.0f}" for k, v in ex.items()))
sys.exit(1 if bad else 0)
