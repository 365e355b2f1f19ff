#!/usr/bin/python3
"""Megatron-Core's Mixture-of-Experts layer for the float64 PyTorch reference (mgt_ref.py).

Written from Megatron-Core's megatron/core/transformer/moe/ (moe_utils.py router math, moe_layer.py order,
1.5 logging), with the details that section leaves open read in Megatron-LM's
megatron/core/transformer/moe/{router.py,moe_utils.py} (facts only; no code shared):
  - group-limited routing selects groups on the sum of the top (k / group_topk) selection scores
    of each group, also in the default softmax path (where the selection scores are the logits);
  - the expert bias enters only the sigmoid path (softmax routing ignores it), for selection;
  - capacity = ceil((T*k / E) * factor); no token is dropped when capacity > T; policy "probs"
    keeps the top-capacity routed probs of each expert column, "position" the first routed tokens
    (token order t = i*b + j, sequence-major); pad_to_capacity makes the capacity mask the map;
  - aux losses use their own scores (softmax over E; sigmoid normalised over E) and their own
    top-k of those scores for the counts; seq_aux_loss views [T, E] as [s, b*E] and divides by b;
  - tokens per expert for the bias update are counted on the routing map after dropping;
  - the aux and z losses reach the gradient with scale loss_scale / num_microbatches
    (MoEAuxLossAutoScaler) and are not in the lm loss; the log reports aux / coeff (and z / coeff)
    summed over micro-batches times 1 / num_microbatches, summed over layers / num MoE layers;
  - the expert bias is float32 and is updated once per global batch:
    bias = fp32(bias + fp32(rate) * sign(mean(count) - count)).
Experts and shared experts have no biases (lib/model/table.c add_moe); the router has one with
add_bias_linear.
With moe_latent_size (moe_layer.py MoELayer: fc1_latent_proj before the dispatch, fc2_latent_proj
after the combine, neither with a bias here) the routed experts run in the latent width; the
router and the shared expert read the full hidden state, and the shared expert's output is added
after fc2_latent_proj.

Public pieces:
  MOE_DEFAULTS, normalize_moe(a)           argument defaults and checks (called by normalize_args)
  moe_layer_flags(a)                       [bool] per layer: is it an MoE layer (mgt_moe_is_layer)
  moe_specs(a, prefix)                     tensor specs of one MoE layer (names as add_moe)
  moe_forward(a, p, i, x, bias32)          the vectorised layer: out [b, s, h], record, loss terms
  update_expert_bias(bias32, counts, rate) the once-per-global-batch update
  naive_moe(a, P, i, xs, bias)             an independent loop-by-loop layer (selfcheck only)
  selfcheck()                              naive vs vectorised, values and gradients
"""
import math

import numpy as np
import torch
import torch.nn.functional as F

MOE_DEFAULTS = {
    "num_experts": None, "moe_ffn_hidden_size": None, "moe_router_topk": 2, "moe_layer_freq": 1,
    "moe_layer_pattern": "", "moe_router_score_function": "softmax", "moe_router_pre_softmax": False,
    "moe_router_topk_scaling_factor": None, "moe_router_num_groups": None, "moe_router_group_topk": None,
    "moe_router_enable_expert_bias": False, "moe_router_bias_update_rate": 1e-3,
    "moe_router_load_balancing_type": "aux_loss", "moe_aux_loss_coeff": 0.0, "moe_z_loss_coeff": None,
    "moe_input_jitter_eps": None, "moe_expert_capacity_factor": None, "moe_token_drop_policy": "probs",
    "moe_pad_expert_input_to_capacity": False, "moe_shared_expert_intermediate_size": None,
    "moe_shared_expert_gate": False, "moe_router_dtype": None, "moe_latent_size": None,
}
# mgt writes 0 where Megatron has None
_ZERO_IS_NONE = ("num_experts", "moe_ffn_hidden_size", "moe_router_topk_scaling_factor", "moe_router_num_groups",
                 "moe_router_group_topk", "moe_z_loss_coeff", "moe_input_jitter_eps",
                 "moe_expert_capacity_factor", "moe_shared_expert_intermediate_size", "moe_latent_size")
_BOOLS = ("moe_router_pre_softmax", "moe_router_enable_expert_bias", "moe_pad_expert_input_to_capacity",
          "moe_shared_expert_gate")


def _pattern(freq):
    """moe_layer_freq as a '0'/'1' string, or None for an int frequency."""
    if isinstance(freq, (list, tuple)):
        return "".join("1" if int(v) else "0" for v in freq)
    if isinstance(freq, str):
        s = freq.strip()
        if s.lstrip("-").isdigit():
            return None
        # Megatron's list expression, e.g. "([0]*3+[1]*58)"
        if not s or not set(s) <= set("0123456789[]()*+, "):
            raise ValueError("moe_layer_freq %r not understood" % freq)
        return _pattern(list(eval(s, {"__builtins__": {}}, {})))  # digits and list operators only
    return None


def normalize_moe(a):
    """Fill MoE defaults and derived values into the normalized args dict a (in place)."""
    for k, v in MOE_DEFAULTS.items():
        if a.get(k) is None:
            a[k] = v
    for k in _ZERO_IS_NONE:
        if a.get(k) in (0, 0.0):
            a[k] = None
    for k in _BOOLS:
        v = a[k]
        a[k] = v.lower() in ("1", "true", "yes", "on") if isinstance(v, str) else bool(v)
    if a["moe_layer_pattern"] is None:
        a["moe_layer_pattern"] = ""
    if not a["num_experts"]:
        a["num_experts"] = None
        if a["moe_latent_size"]:
            raise ValueError("moe_latent_size needs num_experts")
        return a
    E, k = a["num_experts"], a["moe_router_topk"]
    if a["moe_ffn_hidden_size"] is None:
        a["moe_ffn_hidden_size"] = a["ffn_hidden_size"]
    if not 1 <= k <= E:
        raise ValueError("moe_router_topk %d not in 1..%d" % (k, E))
    if a["moe_router_score_function"] not in ("softmax", "sigmoid"):
        raise ValueError("moe_router_score_function %r not in the reference" % a["moe_router_score_function"])
    if a["moe_router_load_balancing_type"] not in ("aux_loss", "seq_aux_loss", "none"):
        raise ValueError("moe_router_load_balancing_type %r not in the reference"
                         % a["moe_router_load_balancing_type"])
    if a["moe_token_drop_policy"] not in ("probs", "position"):
        raise ValueError("moe_token_drop_policy %r" % a["moe_token_drop_policy"])
    if a["moe_input_jitter_eps"]:
        raise ValueError("moe_input_jitter_eps is random; the reference needs it off")
    G, gk = a["moe_router_num_groups"], a["moe_router_group_topk"]
    if gk and (not G or E % G or gk > G or k % gk or (k // gk) > E // G):
        raise ValueError("group-limited routing: num_groups %s, group_topk %s, topk %d, experts %d"
                         % (G, gk, k, E))
    a["moe_layers"] = moe_layer_flags(a)
    return a


def moe_layer_flags(a):
    """[bool] * num_layers: layer l is MoE (lib/model/table.c mgt_moe_is_layer)."""
    L = a["num_layers"]
    if not a.get("num_experts"):
        return [False] * L
    pat = a.get("moe_layer_pattern") or _pattern(a.get("moe_layer_freq", 1))
    if pat:
        return [l < len(pat) and pat[l] == "1" for l in range(L)]
    f = int(a.get("moe_layer_freq") or 1)
    return [f <= 1 or l % f == 0 for l in range(L)]


def moe_specs(a, p, ln_bias):
    """[(name, shape, init, weight_decay)] of one MoE layer's MLP part, prefix p = decoder.layers.N."""
    hid, E, Fx = a["hidden_size"], a["num_experts"], a["moe_ffn_hidden_size"]
    S, lat = a["moe_shared_expert_intermediate_size"], a["moe_latent_size"]
    h = lat or hid  # the routed experts' hidden side
    gl = 2 if a["swiglu"] else 1
    s = [(p + "pre_mlp_layernorm.weight", (hid,), "one", False)]
    if ln_bias:
        s.append((p + "pre_mlp_layernorm.bias", (hid,), "zero", False))
    s.append((p + "mlp.router.weight", (E, hid), "normal", True))
    if a["add_bias_linear"]:
        s.append((p + "mlp.router.bias", (E,), "zero", False))
    if a["moe_router_enable_expert_bias"]:
        s.append((p + "mlp.router.expert_bias", (E,), "zero", False))  # frozen (no gradient)
    if lat:
        s.append((p + "mlp.fc1_latent_proj.weight", (lat, hid), "normal", True))
        s.append((p + "mlp.fc2_latent_proj.weight", (hid, lat), "proj", True))
    for e in range(E):
        q = p + "mlp.experts.local_experts.%d." % e
        s.append((q + "linear_fc1.weight", (gl * Fx, h), "normal", True))
        s.append((q + "linear_fc2.weight", (h, Fx), "proj", True))
    if S:
        s.append((p + "mlp.shared_experts.linear_fc1.weight", (gl * S, hid), "normal", True))
        s.append((p + "mlp.shared_experts.linear_fc2.weight", (hid, S), "proj", True))
        if a["moe_shared_expert_gate"]:
            s.append((p + "mlp.shared_experts.gate_weight", (1, hid), "normal", True))
    return s


def is_frozen(name):
    return name.endswith(".mlp.router.expert_bias")


def lb_name(a):
    """Megatron's tracker name of the load-balancing loss, or None when there is none."""
    if not a.get("num_experts") or not a["moe_aux_loss_coeff"] or a["moe_router_load_balancing_type"] == "none":
        return None
    return {"aux_loss": "load_balancing_loss", "seq_aux_loss": "seq_load_balancing_loss"}[
        a["moe_router_load_balancing_type"]]


def update_expert_bias(bias32, counts, rate):
    """Aux-loss-free balancing (get_updated_expert_bias), in float32 like Megatron:
    bias + sign(mean(counts) - counts) * rate."""
    c = np.asarray(counts, dtype=np.float64)
    off = c.sum() / c.shape[-1] - c
    return (np.asarray(bias32, dtype=np.float32) + np.sign(off).astype(np.float32) * np.float32(rate)).astype(np.float32)


# ---------------------------------------------------------------------------------------------
# the vectorised layer

def _act(a, y):
    if a["swiglu"]:
        g, u = torch.chunk(y, 2, dim=-1)
        return F.silu(g) * u
    if a["openai_gelu"]:
        return 0.5 * y * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (y + 0.044715 * y.pow(3))))
    if a.get("squared_relu"):
        return torch.pow(F.relu(y), 2)
    return F.gelu(y)


def _topk_select(a, scores):
    """Top-k over the selection scores [T, E], group-limited when configured.
    Returns (values, indices, gap) with gap [T] the margin of the selection (k-th minus (k+1)-th
    score, and for groups the group_topk-th minus the next group score; inf where none)."""
    T, E = scores.shape
    k, G, gk = a["moe_router_topk"], a["moe_router_num_groups"], a["moe_router_group_topk"]
    inf = torch.full((T,), float("inf"), dtype=torch.float64)
    gap = inf.clone()
    masked = scores
    if gk:
        gs = scores.view(T, G, E // G).topk(k // gk, dim=-1)[0].sum(dim=-1)      # [T, G]
        if gk < G:
            srt = gs.detach().double().sort(dim=-1, descending=True)[0]
            gap = torch.minimum(gap, srt[:, gk - 1] - srt[:, gk])
        gidx = gs.topk(gk, dim=-1)[1]
        gmask = torch.zeros(T, G, dtype=torch.bool).scatter(1, gidx, True)
        smask = gmask.unsqueeze(-1).expand(T, G, E // G).reshape(T, E)
        masked = scores.masked_fill(~smask, float("-inf"))
    vals, idx = masked.topk(k, dim=-1)
    if k < E:
        srt = masked.detach().double().sort(dim=-1, descending=True)[0]
        g2 = srt[:, k - 1] - srt[:, k]
        gap = torch.minimum(gap, torch.where(torch.isfinite(g2), g2, inf))
    return vals, idx, gap


def route(a, logits, bias=None):
    """Megatron's topk_routing_with_score_function on logits [T, E]: (probs [T, k] in the order of
    idx, idx [T, k], gap [T])."""
    k = a["moe_router_topk"]
    if a["moe_router_score_function"] == "softmax":
        if a["moe_router_pre_softmax"]:
            probs, idx, gap = _topk_select(a, torch.softmax(logits, dim=-1))
        else:
            vals, idx, gap = _topk_select(a, logits)
            probs = torch.softmax(vals, dim=-1)
    else:
        scores = torch.sigmoid(logits)
        if bias is not None:
            _, idx, gap = _topk_select(a, scores + bias)
            probs = torch.gather(scores, 1, idx)
        else:
            probs, idx, gap = _topk_select(a, scores)
        if k > 1:
            probs = probs / (probs.sum(dim=-1, keepdim=True) + 1e-20)
    if a["moe_router_topk_scaling_factor"]:
        probs = probs * a["moe_router_topk_scaling_factor"]
    return probs, idx, gap


def capacity_of(a, T):
    """Megatron's get_capacity(T*k, E, factor), or None without a capacity factor."""
    f = a["moe_expert_capacity_factor"]
    if f is None:
        return None
    return int(math.ceil((T * a["moe_router_topk"] / a["num_experts"]) * f))


def drop_tokens(a, rprobs, rmap, gap):
    """apply_router_token_dropping: (final_map [T, E] bool, gap updated for capacity-boundary ties)."""
    T, E = rmap.shape
    cap = capacity_of(a, T)
    if cap is None:
        return rmap, gap
    if cap > T:
        capmask = torch.ones_like(rmap)
    else:
        capmask = torch.zeros_like(rmap)
        pd = rprobs.detach().double()
        for e in range(E):  # a loop over experts; the columns are independent
            col = rmap[:, e].nonzero().squeeze(1)
            if a["moe_token_drop_policy"] == "probs":
                order = col[torch.argsort(pd[col, e], descending=True)]
                if len(order) > cap:  # a near-tie at the boundary decides which token is dropped
                    g = float(pd[order[cap - 1], e] - pd[order[cap], e])
                    for t in (order[cap - 1], order[cap]):
                        gap[t] = min(float(gap[t]), g)
            else:
                order = col  # the first routed tokens in token order
            keep = order[:cap]
            capmask[keep, e] = True
            if a["moe_pad_expert_input_to_capacity"] and len(keep) < cap:  # zero-prob filler tokens
                free = (~rmap[:, e]).nonzero().squeeze(1)[: cap - len(keep)]
                capmask[free, e] = True
    if a["moe_pad_expert_input_to_capacity"]:
        return capmask, gap
    return rmap & capmask, gap


def aux_losses(a, logits, T, S, B):
    """(aux_unscaled or None, z_unscaled or None): tensors with gradient; the loss terms that reach
    the gradient are coeff * value."""
    E, k = a["num_experts"], a["moe_router_topk"]
    aux = z = None
    name = lb_name(a)
    if name:
        if a["moe_router_score_function"] == "softmax":
            sc = torch.softmax(logits, dim=-1)
        else:
            sg = torch.sigmoid(logits)
            sc = sg / (sg.sum(dim=-1, keepdim=True) + 1e-20)
        ai = sc.detach().topk(k, dim=-1)[1]
        amap = torch.zeros_like(sc).scatter(1, ai, 1.0)
        if name == "load_balancing_loss":
            aux = (sc.sum(0) * amap.sum(0)).sum() * (E / (k * T * T))
        else:  # per sequence: [s, b*E]
            sc2, am2 = sc.reshape(S, B * E), amap.reshape(S, B * E)
            aux = (sc2.sum(0) * am2.sum(0)).sum() * (E / (k * S * S)) / B
    if a["moe_z_loss_coeff"]:
        z = torch.logsumexp(logits, dim=-1).pow(2).mean()
    return aux, z


def moe_forward(a, p, i, x, bias32=None, aux_grad_scale=1.0):
    """The MoE MLP of layer i on x [b, s, h] (after pre_mlp_layernorm).
    p: {name: tensor}.  bias32: the layer's float32 expert bias (numpy) or None.
    Returns (out [b, s, h], record, loss): loss is the tensor whose gradient Megatron adds (coeff *
    aux + coeff * z, times aux_grad_scale) or None; record (numpy, detached) holds experts [b, s, k]
    int (ascending, dropped copies -1), probs [b, s, k] (0 where dropped), gap [b, s], counts [E]
    (tokens per expert after dropping), aux / z (unscaled floats or None)."""
    b, s, h = x.shape
    T, E, k = s * b, a["num_experts"], a["moe_router_topk"]
    pre = "decoder.layers.%d.mlp." % i
    xt = x.transpose(0, 1).reshape(T, h)                 # token t = i*b + j
    logits = xt @ p[pre + "router.weight"].t()
    if pre + "router.bias" in p:
        logits = logits + p[pre + "router.bias"]
    use_bias = a["moe_router_enable_expert_bias"] and a["moe_router_score_function"] == "sigmoid"
    bias = torch.as_tensor(np.asarray(bias32, dtype=np.float64)).to(x.dtype) if use_bias and bias32 is not None else None
    probs, idx, gap = route(a, logits, bias)
    rprobs = torch.zeros(T, E, dtype=x.dtype).scatter(1, idx, probs)
    rmap = torch.zeros(T, E, dtype=torch.bool).scatter(1, idx, True)
    fmap, gap = drop_tokens(a, rprobs, rmap, gap)
    fprobs = rprobs * fmap.to(x.dtype)
    aux, z = aux_losses(a, logits, T, s, b)
    loss = None
    if aux is not None:
        loss = aux * a["moe_aux_loss_coeff"]
    if z is not None:
        zt = z * a["moe_z_loss_coeff"]
        loss = zt if loss is None else loss + zt
    if loss is not None:
        loss = loss * aux_grad_scale
    lat = a["moe_latent_size"]
    xr = xt @ p[pre + "fc1_latent_proj.weight"].t() if lat else xt   # the routed experts' input
    out = torch.zeros(T, lat or h, dtype=x.dtype)
    for e in range(E):
        tok = fmap[:, e].nonzero().squeeze(1)
        if tok.numel() == 0:
            continue
        q = pre + "experts.local_experts.%d." % e
        y = _act(a, xr[tok] @ p[q + "linear_fc1.weight"].t())
        y = y * fprobs[tok, e].unsqueeze(1)             # the prob multiplies the activation, before fc2
        out = out.index_add(0, tok, y @ p[q + "linear_fc2.weight"].t())
    if lat:
        out = out @ p[pre + "fc2_latent_proj.weight"].t()
    if pre + "shared_experts.linear_fc1.weight" in p:
        sh = _act(a, xt @ p[pre + "shared_experts.linear_fc1.weight"].t()) @ p[pre + "shared_experts.linear_fc2.weight"].t()
        if pre + "shared_experts.gate_weight" in p:
            sh = sh * torch.sigmoid(xt @ p[pre + "shared_experts.gate_weight"].t())
        out = out + sh
    # record: the k chosen experts of each token ascending, with their probs; dropped copies -1 / 0
    with torch.no_grad():
        order = torch.argsort(idx, dim=1)
        ex = torch.gather(idx, 1, order)
        pr = torch.gather(fprobs, 1, ex)
        kept = torch.gather(fmap, 1, ex)
        ex = torch.where(kept, ex, torch.full_like(ex, -1))
        rec = {"experts": ex.view(s, b, k).transpose(0, 1).numpy().astype(np.int64),
               "probs": pr.view(s, b, k).transpose(0, 1).double().numpy(),
               "gap": gap.view(s, b).transpose(0, 1).numpy(),
               "counts": fmap.sum(0).numpy().astype(np.int64),
               "aux": None if aux is None else float(aux), "z": None if z is None else float(z),
               "capacity": capacity_of(a, T)}
    return out.view(s, b, h).transpose(0, 1), rec, loss


# ---------------------------------------------------------------------------------------------
# an independent loop-by-loop layer (plain Python floats; no torch, no batching)

def naive_moe(a, P, i, xs, bias=None):
    """The MoE MLP of layer i on the tokens xs ([T][h] lists, token order t = i*b + j, already
    normalised), with P {name: numpy array}.  Returns (outs [T][h], rec) where rec has experts and
    probs [T][k] (ascending experts; dropped -1 / 0.0), counts [E], aux, z (unscaled or None)."""
    T, h = len(xs), len(xs[0])
    E, k = a["num_experts"], a["moe_router_topk"]
    G, gk = a["moe_router_num_groups"], a["moe_router_group_topk"]
    pre = "decoder.layers.%d.mlp." % i
    W = P[pre + "router.weight"]
    rb = P.get(pre + "router.bias")
    sig = a["moe_router_score_function"] == "sigmoid"
    use_bias = sig and a["moe_router_enable_expert_bias"] and bias is not None

    def dot(u, v):
        return sum(float(u[c]) * float(v[c]) for c in range(len(u)))

    def softmax(v):
        m = max(v)
        ex = [math.exp(x - m) for x in v]
        z = sum(ex)
        return [x / z for x in ex]

    def sigmoid(v):
        return 1.0 / (1.0 + math.exp(-v))

    def pick(sel):
        """the k experts with the largest sel (restricted to the best groups)"""
        allowed = list(range(E))
        if gk:
            per = E // G
            gscore = []
            for g in range(G):
                mem = sorted((sel[e] for e in range(g * per, (g + 1) * per)), reverse=True)
                gscore.append(sum(mem[: k // gk]))
            best = sorted(range(G), key=lambda g: -gscore[g])[:gk]
            allowed = [e for e in range(E) if e // per in best]
        return sorted(allowed, key=lambda e: -sel[e])[:k]

    logits, chosen, probs = [], [], []
    for t in range(T):
        lg = [dot(W[e], xs[t]) + (float(rb[e]) if rb is not None else 0.0) for e in range(E)]
        logits.append(lg)
        if not sig:
            if a["moe_router_pre_softmax"]:
                sm = softmax(lg)
                ch = pick(sm)
                pr = [sm[e] for e in ch]
            else:
                ch = pick(lg)
                pr = softmax([lg[e] for e in ch])
        else:
            sc = [sigmoid(x) for x in lg]
            ch = pick([sc[e] + float(bias[e]) for e in range(E)] if use_bias else sc)
            pr = [sc[e] for e in ch]
            if k > 1:
                tot = sum(pr)
                pr = [x / (tot + 1e-20) for x in pr]
        if a["moe_router_topk_scaling_factor"]:
            pr = [x * a["moe_router_topk_scaling_factor"] for x in pr]
        chosen.append(ch)
        probs.append(dict(zip(ch, pr)))
    # capacity
    kept = [set(ch) for ch in chosen]
    counts = [sum(1 for t in range(T) if e in kept[t]) for e in range(E)]
    f = a["moe_expert_capacity_factor"]
    if f is not None:
        cap = math.ceil(T * k / E * f)
        if cap <= T:
            for e in range(E):
                routed = [t for t in range(T) if e in chosen[t]]
                if a["moe_token_drop_policy"] == "probs":
                    routed.sort(key=lambda t: -probs[t][e])
                for t in routed[cap:]:
                    kept[t].discard(e)
        counts = [sum(1 for t in range(T) if e in kept[t]) for e in range(E)]
        if a["moe_pad_expert_input_to_capacity"]:  # every expert is filled to its capacity
            counts = [min(cap, T)] * E
    # experts, token by token and expert by expert

    def act(y):
        if a["swiglu"]:  # [gate; up]
            half = len(y) // 2
            return [y[c] / (1 + math.exp(-y[c])) * y[half + c] for c in range(half)]
        if a["openai_gelu"]:
            return [0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3))) for v in y]
        if a.get("squared_relu"):
            return [max(v, 0.0) ** 2 for v in y]
        return [0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in y]

    def mlp(w1, w2, x, scale):
        y = act([dot(w1[r], x) for r in range(w1.shape[0])])
        y = [v * scale for v in y]
        return [dot(w2[c], y) for c in range(w2.shape[0])]

    def proj(w, x):
        return [dot(w[r], x) for r in range(w.shape[0])]

    lat = a["moe_latent_size"]
    outs = []
    for t in range(T):
        xr = proj(P[pre + "fc1_latent_proj.weight"], xs[t]) if lat else xs[t]
        o = [0.0] * (lat or h)
        for e in range(E):
            if e not in kept[t]:
                continue
            q = pre + "experts.local_experts.%d." % e
            y = mlp(P[q + "linear_fc1.weight"], P[q + "linear_fc2.weight"], xr, probs[t][e])
            o = [o[c] + y[c] for c in range(len(o))]
        if lat:
            o = proj(P[pre + "fc2_latent_proj.weight"], o)
        if pre + "shared_experts.linear_fc1.weight" in P:
            y = mlp(P[pre + "shared_experts.linear_fc1.weight"], P[pre + "shared_experts.linear_fc2.weight"], xs[t], 1.0)
            if pre + "shared_experts.gate_weight" in P:
                gt = sigmoid(dot(P[pre + "shared_experts.gate_weight"][0], xs[t]))
                y = [v * gt for v in y]
            o = [o[c] + y[c] for c in range(h)]
        outs.append(o)
    # losses
    aux = z = None
    name = lb_name(a)
    if name:
        full = []
        for t in range(T):
            if sig:
                sc = [sigmoid(x) for x in logits[t]]
                tot = sum(sc)
                full.append([x / (tot + 1e-20) for x in sc])
            else:
                full.append(softmax(logits[t]))
        top = [set(sorted(range(E), key=lambda e: -full[t][e])[:k]) for t in range(T)]
        if name == "load_balancing_loss":
            aux = sum(sum(full[t][e] for t in range(T)) * sum(1 for t in range(T) if e in top[t])
                      for e in range(E)) * E / (k * T * T)
        else:
            B = a["_b"]
            S = T // B
            aux = 0.0
            for j in range(B):
                toks = [q * B + j for q in range(S)]
                aux += sum(sum(full[t][e] for t in toks) * sum(1 for t in toks if e in top[t])
                           for e in range(E)) * E / (k * S * S)
            aux /= B
    if a["moe_z_loss_coeff"]:
        zz = 0.0
        for t in range(T):
            m = max(logits[t])
            zz += (m + math.log(sum(math.exp(x - m) for x in logits[t]))) ** 2
        z = zz / T
    ex, pr = [], []
    for t in range(T):
        ch = sorted(chosen[t])
        ex.append([e if e in kept[t] else -1 for e in ch])
        pr.append([probs[t][e] if e in kept[t] else 0.0 for e in ch])
    return outs, {"experts": ex, "probs": pr, "counts": counts, "aux": aux, "z": z}


# ---------------------------------------------------------------------------------------------
# selfcheck: naive vs vectorised

SELFCHECK_MOE = {
    # name: (extra args, b, s)
    "softmax-top2-aux-z-swiglu": (dict(num_experts=4, moe_router_topk=2, swiglu=True, moe_aux_loss_coeff=1e-2,
                                       moe_z_loss_coeff=1e-3), 2, 5),
    "softmax-top1-gelu": (dict(num_experts=3, moe_router_topk=1, moe_aux_loss_coeff=1e-2), 2, 4),
    "pre-softmax-top3-seq-aux": (dict(num_experts=6, moe_router_topk=3, moe_router_pre_softmax=True,
                                      moe_router_load_balancing_type="seq_aux_loss", moe_aux_loss_coeff=1e-3), 3, 4),
    "softmax-groups": (dict(num_experts=12, moe_router_topk=4, moe_router_num_groups=3, moe_router_group_topk=2,
                            swiglu=True, moe_aux_loss_coeff=1e-2), 2, 4),
    "sigmoid-bias-groups-scale-shared": (dict(num_experts=16, moe_router_topk=4, moe_router_score_function="sigmoid",
                                              moe_router_enable_expert_bias=True, moe_router_num_groups=4,
                                              moe_router_group_topk=2, moe_router_topk_scaling_factor=2.5,
                                              moe_router_load_balancing_type="seq_aux_loss", moe_aux_loss_coeff=1e-4,
                                              moe_shared_expert_intermediate_size=12, swiglu=True), 2, 4),
    "sigmoid-top1-zloss": (dict(num_experts=4, moe_router_topk=1, moe_router_score_function="sigmoid",
                                moe_z_loss_coeff=1e-3, moe_aux_loss_coeff=1e-2), 2, 4),
    "capacity-probs": (dict(num_experts=4, moe_router_topk=2, moe_expert_capacity_factor=0.75,
                            moe_aux_loss_coeff=1e-2, swiglu=True), 2, 8),
    "capacity-position": (dict(num_experts=4, moe_router_topk=2, moe_expert_capacity_factor=0.75,
                               moe_token_drop_policy="position", moe_aux_loss_coeff=1e-2), 2, 8),
    "capacity-probs-pad": (dict(num_experts=4, moe_router_topk=2, moe_expert_capacity_factor=1.0,
                                moe_pad_expert_input_to_capacity=True, moe_aux_loss_coeff=1e-2), 2, 8),
    "capacity-position-pad-sigmoid-bias": (dict(num_experts=4, moe_router_topk=2, moe_expert_capacity_factor=0.5,
                                                moe_token_drop_policy="position", moe_pad_expert_input_to_capacity=True,
                                                moe_router_score_function="sigmoid",
                                                moe_router_enable_expert_bias=True), 2, 8),
    "shared-gate-softmax-top2": (dict(num_experts=4, moe_router_topk=2, moe_shared_expert_intermediate_size=10,
                                      moe_shared_expert_gate=True, moe_aux_loss_coeff=1e-2,
                                      moe_z_loss_coeff=1e-3), 2, 5),
    "latent-sigmoid-bias-shared-squared-relu": (dict(num_experts=4, moe_router_topk=2, moe_latent_size=5,
                                                     moe_router_score_function="sigmoid",
                                                     moe_router_enable_expert_bias=True,
                                                     moe_shared_expert_intermediate_size=6, squared_relu=True,
                                                     moe_aux_loss_coeff=1e-2), 2, 4),
    "latent-wider-swiglu-gate": (dict(num_experts=3, moe_router_topk=2, moe_latent_size=11, swiglu=True,
                                      moe_shared_expert_intermediate_size=4, moe_shared_expert_gate=True,
                                      moe_aux_loss_coeff=1e-2, moe_z_loss_coeff=1e-3), 2, 4),
    "shared-gate-openai-gelu-layernorm-bias": (dict(num_experts=4, moe_router_topk=2,
                                                    moe_shared_expert_intermediate_size=8,
                                                    moe_shared_expert_gate=True, openai_gelu=True,
                                                    add_bias_linear=True), 2, 4),
}


def _layer_case(mgt_ref, extra, b, s, seed=11):
    a = dict(num_layers=1, hidden_size=8, num_attention_heads=2, seq_length=s, max_position_embeddings=s,
             padded_vocab_size=16, micro_batch_size=b, global_batch_size=b, init_method_std=0.4,
             ffn_hidden_size=6, add_bias_linear=False)
    a.update(extra)
    a = mgt_ref.normalize_args(a)
    P = mgt_ref.init_params(a, seed=seed, perturb=0.3)
    P = {n: x.astype(np.float64) for n, x in P.items()}
    x = np.random.default_rng(seed + 1).normal(0.0, 1.0, (b, s, a["hidden_size"]))
    return a, P, x


def selfcheck(mgt_ref, verbose=True):
    """Every SELFCHECK_MOE case: naive_moe vs moe_forward (outputs, chosen experts, probs, counts,
    aux, z), then gradients of J = <out, R> + coeff*aux + coeff*z by central differences of
    naive_moe against autograd of moe_forward.  Returns the number of failures."""
    bad = 0
    for name, (extra, b, s) in SELFCHECK_MOE.items():
        a, P, x = _layer_case(mgt_ref, extra, b, s)
        a["_b"] = b
        pre = "decoder.layers.0.mlp."
        bias = P.get(pre + "router.expert_bias")
        b32 = None if bias is None else bias.astype(np.float32)
        xs = [list(x[j, q]) for q in range(s) for j in range(b)]  # token order t = q*b + j
        outs, nrec = naive_moe(a, P, 0, xs, b32)
        p = {n: torch.tensor(v, dtype=torch.float64, requires_grad=not is_frozen(n)) for n, v in P.items()}
        xt = torch.tensor(x, dtype=torch.float64)
        out, rec, loss = moe_forward(a, p, 0, xt, b32)
        vo = out.detach().numpy()
        no = np.array(outs).reshape(s, b, -1).transpose(1, 0, 2)
        e_out = np.abs(vo - no).max() / np.abs(no).max()
        n_ex = np.array(nrec["experts"]).reshape(s, b, -1).transpose(1, 0, 2)
        n_pr = np.array(nrec["probs"]).reshape(s, b, -1).transpose(1, 0, 2)
        ex_ok = np.array_equal(n_ex, rec["experts"])
        e_pr = np.abs(n_pr - rec["probs"]).max()
        cnt_ok = list(rec["counts"]) == list(nrec["counts"])
        have = [k_ for k_ in ("aux", "z") if (rec[k_] is None) != (nrec[k_] is None)]
        e_aux = max([abs(rec[k_] - nrec[k_]) / abs(nrec[k_]) for k_ in ("aux", "z")
                     if nrec[k_] is not None and rec[k_] is not None] or [0.0])
        ndrop = int((rec["experts"] < 0).sum())
        # gradients: autograd (vectorised) vs central differences (naive)
        R = np.random.default_rng(5).normal(0.0, 1.0, vo.shape)
        J = (out * torch.tensor(R)).sum() + (loss if loss is not None else 0.0)
        J.backward()

        def naive_J(PP):
            o, r = naive_moe(a, PP, 0, xs, b32)
            o = np.array(o).reshape(s, b, -1).transpose(1, 0, 2)
            v = float((o * R).sum())
            if r["aux"] is not None:
                v += a["moe_aux_loss_coeff"] * r["aux"]
            if r["z"] is not None:
                v += a["moe_z_loss_coeff"] * r["z"]
            return v
        rng = np.random.default_rng(9)
        checked = []
        for n in sorted(P):
            if is_frozen(n) or not n.startswith(pre):
                continue
            flat = P[n].reshape(-1)
            picks = range(flat.size) if n.endswith("router.weight") or n.endswith("router.bias") or \
                n.endswith("gate_weight") else rng.choice(flat.size, size=min(4, flat.size), replace=False)
            g = p[n].grad.numpy().reshape(-1) if p[n].grad is not None else np.zeros(flat.size)
            for j in picks:
                hstep = 1e-5
                PP = dict(P)
                PP[n] = P[n].copy()
                PP[n].reshape(-1)[j] += hstep
                up = naive_J(PP)
                PP[n].reshape(-1)[j] -= 2 * hstep
                dn = naive_J(PP)
                checked.append((n, j, (up - dn) / (2 * hstep), g[j]))
        gscale = max(abs(c[2]) for c in checked)
        e_grad = max(abs(c[2] - c[3]) for c in checked) / gscale
        min_gap = float(rec["gap"].min())
        ok = e_out < 1e-12 and ex_ok and e_pr < 1e-12 and cnt_ok and e_aux < 1e-12 and not have and e_grad < 1e-7
        bad += not ok
        if verbose:
            print("selfcheck moe %-38s out %.1e probs %.1e aux/z %.1e experts %s counts %s drops %2d "
                  "grad(fd, %3d entries) %.1e gap %.1e  %s" % (
                      name, e_out, e_pr, e_aux, "=" if ex_ok else "DIFF", "=" if cnt_ok else "DIFF", ndrop,
                      len(checked), e_grad, min_gap, "ok" if ok else "FAIL"))
    # the bias update by hand
    got = update_expert_bias(np.array([0.5, 0, 0, 0], np.float32), [3, 1, 2, 2], 1e-3)
    want = np.array([0.5 - 1e-3, 1e-3, 0, 0], np.float32)
    ok = np.array_equal(got, (np.array([0.5, 0, 0, 0], np.float32) +
                              np.array([-1, 1, 0, 0], np.float32) * np.float32(1e-3)).astype(np.float32)) and \
        np.allclose(got, want, rtol=0, atol=1e-7)
    bad += not ok
    if verbose:
        print("selfcheck moe expert-bias update by hand: %s" % ("ok" if ok else "FAIL"))
    # the layer pattern
    cases = [(dict(num_layers=4, num_experts=2, moe_layer_freq=2), [True, False, True, False]),
             (dict(num_layers=3, num_experts=2, moe_layer_freq=1), [True, True, True]),
             (dict(num_layers=4, num_experts=2, moe_layer_freq="([0]*1+[1]*3)"), [False, True, True, True]),
             (dict(num_layers=3, num_experts=2, moe_layer_freq=[1, 0, 1]), [True, False, True]),
             (dict(num_layers=3, num_experts=2, moe_layer_pattern="011"), [False, True, True]),
             (dict(num_layers=2, num_experts=0, moe_layer_freq=1), [False, False])]
    okp = all(moe_layer_flags(dict(c)) == w for c, w in cases)
    bad += not okp
    if verbose:
        print("selfcheck moe layer pattern: %d cases %s" % (len(cases), "ok" if okp else "FAIL"))
    return bad
