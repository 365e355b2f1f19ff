#!/usr/bin/python3
"""Compare an `mgt-train --debug-dump` file with the PyTorch reference (tests/torch/mgt_ref.py).

The reference is rebuilt from the dump's args and initial parameters in float64; a float32 torch
run of the same model is shown beside mgt as the noise floor a correct fp32 program reaches.
Checks, mgt vs the float64 reference (normwise relative error ||a-b|| / ||b||):
  logits and per-token loss of iteration 1, first micro-batch   <= --tol        (1e-5)
  every gradient of iteration 1 (before clipping), worst tensor <= --tol
    (a tensor whose exact gradient is zero, fp64 norm < 1e-9 of all gradients: error over the
    norm of all gradients)
  the whole run replayed with AdamW from the same parameters and batches:
    lm loss per iteration, relative difference                 <= --tol-train  (1e-5)
    grad norm per iteration, relative difference               <= --tol-train
    learning rate per iteration, relative difference           <= --tol-lr     (1e-9)
  The dump's train/lr may follow either of Megatron's conventions: the lr the iteration used
  (n = (k-1)*GBS samples) or the lr Megatron's log line prints (after the scheduler step,
  n = k*GBS); --lr-convention picks one, default either (the table says which matched).
Hybrid models (args hybrid_layer_pattern; mamba_ref.py) are checked the same way; a Mamba
conv1d_weight may be dumped as [CD, 4] (mgt's table) or Megatron's [CD, 1, 4].
With MoE (args num_experts > 0; moe_ref.py), also, for every MoE layer N:
  iter1/moe/layer_N/experts int32 [mbs, s, k]: per token (iteration 1, first micro-batch) the k
    chosen experts in ascending order, a copy dropped by the capacity as -1; must equal the
    reference's, except tokens whose reference top-k margin is below --tie-gap (1e-9): reported
    and tolerated
  iter1/moe/layer_N/probs float32 [mbs, s, k]: their routing probs (after the scaling factor;
    0 where dropped), normwise relative                          <= --tol (tolerated tokens left out)
  train/load_balancing_loss (seq_aux_loss: train/seq_load_balancing_loss, or load_balancing_loss)
    and train/z_loss float64 [iters]: the logged unscaled values, max relative  <= --tol-train
  final/decoder.layers.N.mlp.router.expert_bias float32 [E] (with the expert bias): its value
    after the run, normwise relative                             <= --tol
  The expert bias has no gradient: grads/ of it are not compared.
Exit status: 0 all within limits, 1 a check failed, 2 unusable dump or usage error.

Usage: parity.py DUMP.h5 [--tol X] [--tol-train X] [--tol-lr X] [--tie-gap X] [--per-iter] [--per-tensor]
                         [--json OUT] [--no-fp32] [--threads N] [--label TEXT]
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mgt_ref  # noqa: E402


def rel(a, b):
    """||a - b|| / ||b|| in float64 (||a - b|| when b is zero)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    d = np.linalg.norm((a - b).ravel())
    nb = np.linalg.norm(b.ravel())
    return float(d / nb) if nb > 0 else float(d)


def rel_each(a, b):
    """Elementwise |a - b| / |b| of two sequences (|a - b| where b == 0)."""
    out = []
    for x, y in zip(a, b):
        x, y = float(x), float(y)
        if math.isnan(x) or math.isnan(y):
            out.append(float("inf"))
        else:
            out.append(abs(x - y) / abs(y) if y != 0 else abs(x - y))
    return out


def replay(args, params, batch, iters, dtype):
    """Run the reference for iters iterations; iteration 1 keeps grads, logits, loss and the
    MoE records of its first micro-batch; hist also gets the MoE report names; first["bias"] is
    the expert bias after the run {layer: float32 [E]}."""
    model = mgt_ref.GPTRef(args, params, dtype)
    tr = mgt_ref.Trainer(model)
    hist = {"lm_loss": [], "lr": [], "lr_logged": [], "grad_norm": []}
    first = None
    for k in range(iters):
        o = tr.step(batch["tokens"][k], batch["labels"][k], batch["loss_mask"][k],
                    batch["position_ids"][k] if "position_ids" in batch else None, keep=(k == 0),
                    seg_start=batch["seg_start"][k] if "seg_start" in batch else None)
        if k == 0:
            first = {"grads": {n: g.numpy() for n, g in o["grads"].items()},
                     "logits": o["logits"].numpy(), "loss": o["loss"].numpy(),
                     "moe": {r["layer"]: r for r in o.get("moe_first", [])}}
        for key in ("lm_loss", "lr", "lr_logged", "grad_norm"):
            hist[key].append(o[key])
        for key, v in o["moe"].items():
            hist.setdefault(key, []).append(v)
    first["bias"] = dict(model.expert_bias32)
    return first, hist


def moe_router_check(d, ref, f32, tie_gap):
    """Per MoE layer: (layer, tokens off, tokens tolerated (ties), probs rel, fp32 probs rel,
    smallest reference margin, error text or None, dropped copies in the dump, in the reference)."""
    out = []
    for i, r in sorted(ref["moe"].items()):
        ke, kp = "moe/layer_%d/experts" % i, "moe/layer_%d/probs" % i
        if ke not in d["iter1"] or kp not in d["iter1"]:
            out.append((i, None, 0, float("inf"), None, float(r["gap"].min()), "iter1/%s or probs missing" % ke, 0, 0))
            continue
        ex, pr = np.asarray(d["iter1"][ke]), np.asarray(d["iter1"][kp], dtype=np.float64)
        if ex.shape != r["experts"].shape or pr.shape != r["probs"].shape:
            out.append((i, None, 0, float("inf"), None, float(r["gap"].min()),
                        "iter1/%s shape %s / probs %s, expected %s" % (ke, ex.shape, pr.shape, r["experts"].shape), 0, 0))
            continue
        diff = np.any(ex != r["experts"], axis=-1)                      # [b, s]
        tie = r["gap"] < tie_gap
        off, tol = int((diff & ~tie).sum()), int((diff & tie).sum())
        keep = ~diff
        e = rel(pr[keep], r["probs"][keep])
        e32 = None
        if f32 is not None and i in f32["moe"]:
            r32 = f32["moe"][i]
            k32 = keep & np.all(r32["experts"] == r["experts"], axis=-1)
            e32 = rel(r32["probs"][k32], r["probs"][k32])
        out.append((i, off, tol, e, e32, float(r["gap"].min()), None, int((ex < 0).sum()), int((r["experts"] < 0).sum())))
    return out


def describe(a):
    nq, ng = a["num_attention_heads"], a["num_query_groups"]
    bits = ["L%d h%d heads %d/%d d%d ffn%d Vpad %d s%d" % (
        a["num_layers"], a["hidden_size"], nq, ng, a["kv_channels"], a["ffn_hidden_size"],
        a["padded_vocab_size"], a["seq_length"])]
    pat = mgt_ref.mamba_ref.symbols(a)
    if pat:
        bits.append("hybrid %s" % pat + (" (mamba heads %d x %d, state %d, groups %d)" % (
            a["mamba_num_heads"], a["mamba_head_dim"], a["mamba_state_dim"], a["mamba_num_groups"])
            if "M" in pat else ""))
    bits.append(a["normalization"])
    bits.append("swiglu" if a["swiglu"] else "relu2" if a.get("squared_relu") else ("gelu-tanh" if a["openai_gelu"] else "gelu"))
    bits.append(a["position_embedding_type"] + (" llama3.1-scaled (x%g, %g..%g, %d)" % (
        a["rope_scaling_factor"], a["rope_scaling_low_freq_factor"], a["rope_scaling_high_freq_factor"],
        a["rope_scaling_original_max_position_embeddings"]) if a["use_rope_scaling"] else ""))
    if a["qk_layernorm"]:
        bits.append("qk-layernorm" + (" (wd)" if a["apply_wd_to_qk_layernorm"] else ""))
    bits.append("untied" if a["untie_embeddings_and_output_weights"] else "tied")
    bits.append("bias" if a["add_bias_linear"] else ("qkv-bias" if a["add_qkv_bias"] else "no-bias"))
    if a["num_experts"]:
        m = "MoE E%d top%d ffn%d layers %s %s%s" % (
            a["num_experts"], a["moe_router_topk"], a["moe_ffn_hidden_size"],
            "".join("1" if x else "0" for x in mgt_ref.moe_ref.moe_layer_flags(a)),
            a["moe_router_score_function"], " pre-softmax" if a["moe_router_pre_softmax"] else "")
        if a["moe_router_enable_expert_bias"]:
            m += " bias(%g)" % a["moe_router_bias_update_rate"]
        if a["moe_router_group_topk"]:
            m += " groups %d/%d" % (a["moe_router_group_topk"], a["moe_router_num_groups"])
        if a["moe_router_topk_scaling_factor"]:
            m += " scale %g" % a["moe_router_topk_scaling_factor"]
        name = mgt_ref.moe_ref.lb_name(a)
        m += " %s %g" % (a["moe_router_load_balancing_type"], a["moe_aux_loss_coeff"]) if name else " no-aux"
        if a["moe_z_loss_coeff"]:
            m += " z %g" % a["moe_z_loss_coeff"]
        if a["moe_expert_capacity_factor"] is not None:
            m += " capacity %g %s%s" % (a["moe_expert_capacity_factor"], a["moe_token_drop_policy"],
                                        " pad" if a["moe_pad_expert_input_to_capacity"] else "")
        if a["moe_shared_expert_intermediate_size"]:
            m += " shared %d%s" % (a["moe_shared_expert_intermediate_size"],
                                   " gated" if a["moe_shared_expert_gate"] else "")
        bits.append(m)
    bits.append("mbs %d gbs %d M %d" % (a["micro_batch_size"], a["global_batch_size"], a["num_microbatches"]))
    bits.append("lr %g %s warmup %s clip %g wd %g" % (a["lr"], a["lr_decay_style"], a["lr_warmup_iters"],
                                                      a["clip_grad"] or 0, a["weight_decay"]))
    return ", ".join(bits)


def main(argv):
    ap = argparse.ArgumentParser(prog="parity.py", description=__doc__.split("\n")[0])
    ap.add_argument("dump")
    ap.add_argument("--tol", type=float, default=1e-5, help="logits, loss, grads (normwise relative)")
    ap.add_argument("--tol-train", type=float, default=1e-5, help="per-iteration lm loss and grad norm")
    ap.add_argument("--tol-lr", type=float, default=1e-9, help="per-iteration learning rate (relative)")
    ap.add_argument("--lr-convention", choices=["used", "logged", "either"], default="either")
    ap.add_argument("--tie-gap", type=float, default=1e-9,
                    help="MoE: a token whose reference top-k margin is below this may choose other experts")
    ap.add_argument("--per-iter", action="store_true", help="print the per-iteration table")
    ap.add_argument("--per-tensor", action="store_true", help="print every gradient tensor's error")
    ap.add_argument("--json", metavar="OUT", help="write the figures as JSON")
    ap.add_argument("--no-fp32", action="store_true", help="skip the float32 torch column")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's)")
    ap.add_argument("--label", default="", help="a name for the table header")
    o = ap.parse_args(argv)
    if o.threads:
        torch.set_num_threads(o.threads)

    try:
        d = mgt_ref.read_dump(o.dump)
        a = mgt_ref.normalize_args(d["args"])
        for grp in ("params", "grads"):  # Mamba conv1d_weight as Megatron's [CD, 1, 4]: the table's [CD, 4]
            for n, x in d[grp].items():
                if n.endswith("mixer.conv1d_weight") and x.ndim == 3 and x.shape[1] == 1:
                    d[grp][n] = x.reshape(x.shape[0], x.shape[2])
        for k in ("tokens", "labels", "loss_mask"):
            if k not in d["batch"]:
                raise ValueError("batch/%s missing" % k)
        for k in ("logits", "loss"):
            if k not in d["iter1"]:
                raise ValueError("iter1/%s missing" % k)
        iters = d["batch"]["tokens"].shape[0]
        if d["batch"]["tokens"].shape[1:] != (a["global_batch_size"], a["seq_length"]):
            raise ValueError("batch/tokens shape %s, expected [iters, %d, %d]" % (
                d["batch"]["tokens"].shape, a["global_batch_size"], a["seq_length"]))
        specs = [n for n, _, _, _ in mgt_ref.tensor_specs(a)]
        want = [n for n in specs if not mgt_ref.moe_ref.is_frozen(n)]  # the tensors with a gradient
        for grp, names in (("params", specs), ("grads", want)):
            miss = [n for n in names if n not in d[grp]]
            extra = [n for n in d[grp] if n not in specs]
            if miss or extra:
                raise ValueError("%s/: missing %s, unexpected %s" % (grp, miss[:4], extra[:4]))
    except (OSError, KeyError, ValueError, TypeError) as e:
        print("parity.py: error: %s: %s" % (o.dump, e), file=sys.stderr)
        return 2

    ref1, refh = replay(a, d["params"], d["batch"], iters, torch.float64)
    f32 = None if o.no_fp32 else replay(a, d["params"], d["batch"], iters, torch.float32)

    rows = []  # (check, mgt, fp32, limit, ok)

    def row(name, m, f, lim):
        rows.append({"check": name, "mgt": m, "fp32": f, "limit": lim, "ok": bool(m <= lim)})

    mb = a["micro_batch_size"]
    lg = d["iter1"]["logits"]
    if lg.shape != ref1["logits"].shape:
        print("parity.py: error: iter1/logits shape %s, expected %s" % (lg.shape, ref1["logits"].shape),
              file=sys.stderr)
        return 2
    row("logits, iter 1, micro-batch 1", rel(lg, ref1["logits"]),
        f32 and rel(f32[0]["logits"], ref1["logits"]), o.tol)
    row("per-token loss, iter 1, micro-batch 1", rel(d["iter1"]["loss"], ref1["loss"]),
        f32 and rel(f32[0]["loss"], ref1["loss"]), o.tol)
    # A tensor whose exact gradient is zero (k_layernorm.bias: softmax ignores a shift common to
    # all keys) has only rounding noise on both sides; its error is taken relative to the norm of
    # all gradients instead of its own (fp64 norm below 1e-9 of the whole).
    gall = math.sqrt(sum(np.linalg.norm(ref1["grads"][n].ravel()) ** 2 for n in want))

    def grel(x, n):
        r = ref1["grads"][n]
        if np.linalg.norm(r.ravel()) < 1e-9 * gall:
            return float(np.linalg.norm((np.asarray(x, dtype=np.float64) - r).ravel()) / gall) if gall else 0.0
        return rel(x, r)
    g_err = {n: grel(d["grads"][n], n) for n in want}
    g32 = {n: grel(f32[0]["grads"][n], n) for n in want} if f32 else {}
    num = sum(np.linalg.norm((d["grads"][n].astype(np.float64) - ref1["grads"][n]).ravel()) ** 2 for n in want)
    den = sum(np.linalg.norm(ref1["grads"][n].ravel()) ** 2 for n in want)
    num32 = sum(np.linalg.norm((f32[0]["grads"][n].astype(np.float64) - ref1["grads"][n]).ravel()) ** 2
                for n in want) if f32 else None
    row("grads, all tensors together", math.sqrt(num / den) if den else math.sqrt(num),
        f32 and math.sqrt(num32 / den), o.tol)
    worst = max(want, key=lambda n: g_err[n])
    worst32 = max(g32.values()) if g32 else None
    row("grads, worst tensor", g_err[worst], worst32, o.tol)

    tr = d["train"]
    lm = tr.get("lm_loss")
    if lm is not None and len(lm) == iters:
        e = rel_each(lm, refh["lm_loss"])
        e32 = rel_each(f32[1]["lm_loss"], refh["lm_loss"]) if f32 else None
        row("lm loss, %d iters (max rel)" % iters, max(e), f32 and max(e32), o.tol_train)
    else:
        e = None
        row("lm loss: train/lm_loss missing or not [%d]" % iters, float("inf"), None, o.tol_train)
    gn = tr.get("grad_norm")
    if gn is not None and len(gn) == iters:
        if not a["clip_grad"] and not np.any(gn):
            eg = [0.0] * iters  # Megatron reports no grad norm without clipping
        else:
            eg = rel_each(gn, refh["grad_norm"])
        eg32 = rel_each(f32[1]["grad_norm"], refh["grad_norm"]) if f32 else None
        row("grad norm, %d iters (max rel)" % iters, max(eg), f32 and max(eg32), o.tol_train)
    else:
        eg = None
        row("grad norm: train/grad_norm missing or not [%d]" % iters, float("inf"), None, o.tol_train)
    lr = tr.get("lr")
    conv = "-"
    if lr is not None and len(lr) == iters:
        eu, el = max(rel_each(lr, refh["lr"])), max(rel_each(lr, refh["lr_logged"]))
        if o.lr_convention == "used" or (o.lr_convention == "either" and eu <= el):
            elr, conv = eu, "used"
        else:
            elr, conv = el, "logged"
        row("lr, %d iters (max rel; %s)" % (iters, conv), elr, None, o.tol_lr)
    else:
        row("lr: train/lr missing or not [%d]" % iters, float("inf"), None, o.tol_lr)

    moe_rows, moe_notes, moe_iter = [], [], {}
    if a["num_experts"]:
        mr = moe_router_check(d, ref1, f32[0] if f32 else None, o.tie_gap)
        moe_rows = mr
        for i, off, tol, _, _, _, err, _, _ in mr:
            if err:
                moe_notes.append("layer %d: %s" % (i, err))
            if tol:
                moe_notes.append("layer %d: %d token(s) chose other experts at a reference top-k margin below %g "
                                 "(tolerated)" % (i, tol, o.tie_gap))
        if mr:
            offs = [x[1] if x[1] is not None else float("inf") for x in mr]
            if a["moe_expert_capacity_factor"] is not None:
                moe_notes.append("dropped copies (dump / reference): " + ", ".join(
                    "layer %d %d/%d" % (x[0], x[7], x[8]) for x in mr))
            row("router experts, iter 1 mb 1 (tokens off)", float(sum(offs)), None, 0)
            e32s = [x[4] for x in mr if x[4] is not None]
            row("router probs, iter 1 mb 1 (worst layer)", max(x[3] for x in mr),
                max(e32s) if f32 and e32s else None, o.tol)
        names = [n for n in refh if n.endswith("load_balancing_loss") or n == "z_loss"]
        for n in names:
            alt = [n] + (["load_balancing_loss"] if n == "seq_load_balancing_loss" else [])
            got = next((tr[k] for k in alt if k in tr), None)
            if got is not None and len(got) == iters:
                em = rel_each(got, refh[n])
                moe_iter[n] = (got, em)
                row("%s, %d iters (max rel)" % (n, iters), max(em),
                    f32 and max(rel_each(f32[1][n], refh[n])), o.tol_train)
            else:
                row("%s: train/%s missing or not [%d]" % (n, n, iters), float("inf"), None, o.tol_train)
        for i, bias in sorted(ref1["bias"].items()):
            key = "decoder.layers.%d.mlp.router.expert_bias" % i
            got = d["final"].get(key)
            if got is None or np.shape(got) != bias.shape:
                row("expert bias after the run: final/%s missing or not [%d]" % (key, bias.shape[0]),
                    float("inf"), None, o.tol)
            else:
                row("expert bias after %d iters, layer %d" % (iters, i), rel(got, bias),
                    f32 and rel(f32[0]["bias"][i], bias), o.tol)

    ok = all(r["ok"] for r in rows)
    label = o.label or os.path.basename(o.dump)
    print("parity %s: %s" % (label, describe(a)))
    print("%-42s %11s %13s %9s" % ("check (normwise rel. vs torch fp64)", "mgt", "torch fp32", "limit"))
    for r in rows:
        f = "%11.2e" % r["fp32"] if r["fp32"] is not None else "%11s" % "-"
        print("%-42s %11.2e %13s %9.0e  %s" % (r["check"], r["mgt"], f, r["limit"], "ok" if r["ok"] else "FAIL"))
    print("%-42s %s" % ("  worst grad tensor", worst))
    for n in moe_notes:
        print("  moe: " + n)
    if moe_rows and (o.per_tensor or not ok):
        print("%6s %9s %9s %11s %11s %11s" % ("layer", "off", "ties", "probs rel", "fp32", "min margin"))
        for i, off, tol, pe, pe32, gap, err, _, _ in moe_rows:
            print("%6d %9s %9d %11.2e %11s %11.2e" % (i, "-" if off is None else off, tol, pe,
                                                      "-" if pe32 is None else "%.2e" % pe32, gap))
    if o.per_iter or not ok:
        print("%4s %14s %14s %9s %11s %11s %9s %12s %12s" % (
            "iter", "lm loss mgt", "lm loss ref", "rel", "gnorm mgt", "gnorm ref", "rel", "lr mgt", "lr ref"))
        ref_lr = refh["lr"] if conv != "logged" else refh["lr_logged"]
        for k in range(iters):
            def g(x, i):
                return float(x[i]) if x is not None and len(x) > i else float("nan")
            print("%4d %14.8f %14.8f %9.1e %11.6f %11.6f %9.1e %12.6e %12.6e" % (
                k + 1, g(lm, k), refh["lm_loss"][k], e[k] if e else float("nan"),
                g(gn, k), refh["grad_norm"][k], eg[k] if eg else float("nan"), g(lr, k), ref_lr[k]))
        for n, (got, em) in moe_iter.items():
            print("%4s %24s %14s %14s %9s" % ("iter", n, "mgt", "ref", "rel"))
            for k in range(iters):
                print("%4d %24s %14.8f %14.8f %9.1e" % (k + 1, "", float(got[k]), refh[n][k], em[k]))
    if o.per_tensor:
        print("%-64s %11s %13s" % ("gradient of iteration 1 (normwise rel.)", "mgt", "torch fp32"))
        for n in want:
            print("%-64s %11.2e %13s" % (n, g_err[n], "%.2e" % g32[n] if g32 else "-"))
    if not ok:
        bad = sorted(want, key=lambda n: -g_err[n])[:5]
        print("largest gradient errors: " + ", ".join("%s %.2e" % (n, g_err[n]) for n in bad))
    print("parity %s: %s" % (label, "PASS" if ok else "FAIL"))
    if o.json:
        with open(o.json, "w") as fh:
            json.dump({"dump": o.dump, "ok": ok, "rows": rows, "worst_grad": worst,
                       "grad_errors": g_err, "lr_convention": conv,
                       "ref": {k: list(map(float, v)) for k, v in refh.items()}}, fh, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
