#!/usr/bin/python3
"""Float64 reference for mgt-eval tasks and mgt-eval perplexity (lm-evaluation-harness's rules).

Independent of mgt's C code: the model is a Hugging Face directory run by tests/hf/ref_forward.py
(float64 torch), text is encoded by tests/eval/gpt2_bpe.py (GPT-2 BPE written from the published
algorithm), and the harness's formulas are applied here (read from EleutherAI/lm-evaluation-harness:
api/model.py loglikelihood + _encode_pair, models/huggingface.py _loglikelihood_tokens (left
truncation to max_length + 1, is_greedy), utils.py get_rolling_token_windows + make_disjoint_window,
api/task.py process_results, api/metrics.py mean / mean_stderr / perplexity / bootstrap_stderr
(random.Random(chunk) draws), tasks/lambada, tasks/hellaswag/utils.py, tasks/wikitext).

usage:
  ref_tasks.py tasks HF_DIR VOCAB MERGES --task F [--task F]... [--task-type T] [--limit N]
               --max-length N [--bootstrap-iters N] --results MGT.json --samples MGT.jsonl [--tol X]
  ref_tasks.py perplexity HF_DIR VOCAB MERGES --texts F [--text-key K] [--limit N] --max-length N
               --output MGT.jsonl [--tol X]
Compares mgt's output with the reference; prints '# ...' lines; exit 0 when everything agrees:
token counts exactly, loglikelihoods within X relative (default 1e-5), is_greedy / acc / acc_norm
exactly, perplexities within the error the loglikelihood tolerance allows, stderrs likewise, and
the bootstrap (recomputed here on mgt's own loglikelihoods) to 1e-9.
"""
import argparse
import json
import math
import os
import random
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "hf"))
sys.path.insert(0, HERE)
import gpt2_bpe  # noqa: E402
import ref_forward  # noqa: E402
import torch  # noqa: E402

EOD = 50256  # <|endoftext|>, GPT-2's end of document: the prefix token


class Model:
    def __init__(self, hf_dir, max_length):
        self.cfg, self.W = ref_forward.load(hf_dir)
        self.max_length = max_length

    def score(self, ctx, cont):
        """(ll, is_greedy) of cont after ctx, left-truncated like HFLM._loglikelihood_tokens."""
        whole = (ctx + cont)[-(self.max_length + 1):]
        inp = whole[:-1]
        logits = ref_forward.forward(self.cfg, self.W, inp)
        lsm = torch.log_softmax(logits.double(), dim=-1)[len(inp) - len(cont):]
        target = torch.tensor(cont)
        ll = float(lsm.gather(1, target[:, None]).sum())
        greedy = bool((lsm.argmax(dim=-1) == target).all())
        return ll, greedy

    def rolling(self, toks):
        """Sum of the loglikelihoods of the disjoint rolling windows (context_len 1)."""
        total, windows = 0.0, 0
        for ctx, pred in rolling_windows(toks, EOD, self.max_length, 1):
            ctx = ctx[: len(ctx) - (len(pred) - 1)]  # make_disjoint_window
            total += self.score(ctx, pred)[0]
            windows += 1
        return total, windows


def rolling_windows(toks, prefix, max_seq_len, context_len):
    pred_len = max_seq_len - context_len + 1
    first = min(max_seq_len, len(toks))
    yield [prefix] + toks[: first - 1], toks[:first]
    done = first
    while done < len(toks):
        n = min(len(toks) - done, pred_len)
        end = done + n
        yield toks[end - max_seq_len - 1: end - 1], toks[end - n: end]
        done += n


def encode_pair(enc, ctx, cont):
    if ctx == "":
        c = enc.encode(cont)
        return ([EOD], c) if c[0] != EOD else (c[:1], c[1:])
    n = len(ctx) - len(ctx.rstrip())
    if n:
        cont, ctx = ctx[-n:] + cont, ctx[:-n]
    whole, c = enc.encode(ctx + cont), enc.encode(ctx)
    return c, whole[len(c):]


def hs_preprocess(text):
    text = text.strip().replace(" [title]", ". ")
    text = re.sub("\\[.*?\\]", "", text)
    return text.replace("  ", " ")


def make_doc(d, kind):
    """-> (context, [continuations], [choice strings], gold, multiple_choice)."""
    if kind == "lambada":
        w = d["text"].split(" ")
        return " ".join(w[:-1]), [" " + w[-1]], None, 0, False
    if kind == "cloze":
        return d["context"], [d["continuation"]], None, 0, False
    if kind == "hellaswag":
        q = hs_preprocess(d["activity_label"] + ": " + d["ctx_a"] + " " + d["ctx_b"].capitalize())
        ch = [hs_preprocess(e) for e in d["endings"]]
        return q, [" " + c for c in ch], ch, int(d["label"]), True
    return d["context"], [" " + c for c in d["choices"]], d["choices"], d["gold"], True


def detect(d):
    for k, kind in (("text", "lambada"), ("endings", "hellaswag"), ("choices", "choice"), ("continuation", "cloze")):
        if k in d:
            return kind
    raise SystemExit("cannot tell the task's kind")


def mean(a):
    return sum(a) / len(a)


def mean_stderr(a):
    mu = mean(a)
    return math.sqrt(sum((x - mu) ** 2 for x in a) / (len(a) - 1)) / math.sqrt(len(a))


def perplexity(a):
    return math.exp(-mean(a))


def bootstrap_stderr(f, xs, iters):
    chunk = min(1000, iters)
    res = []
    for i in range(iters // chunk):
        rnd = random.Random(i)
        for _ in range(chunk):
            res.append(f(rnd.choices(xs, k=len(xs))))
    mu = mean(res)
    return math.sqrt(sum((x - mu) ** 2 for x in res) / (len(res) - 1))


class Check:
    def __init__(self):
        self.bad = 0

    def eq(self, what, got, want):
        if got != want:
            self.bad += 1
            if self.bad <= 10:
                print("# %s: mgt %r, reference %r" % (what, got, want))

    def close(self, what, got, want, rel):
        if got is None or isinstance(got, str) or abs(got - want) > rel * abs(want):
            self.bad += 1
            if self.bad <= 10:
                print("# %s: mgt %r, reference %r (tolerance %.1e relative)" % (what, got, want, rel))


def run_tasks(a, model, enc, ck):
    results = json.load(open(a.results))["results"]
    samples = [json.loads(l) for l in open(a.samples)]
    si, worst = 0, 0.0
    for path in a.task:
        name = re.sub(r"\.(jsonl\.zst|jsonl|json)$", "", os.path.basename(path))
        docs = [json.loads(l) for l in open(path)]
        kind = a.task_type if a.task_type != "auto" else detect(docs[0])
        docs = docs[: a.limit] if a.limit else docs
        acc, acc_norm, lls = [], [], []
        for i, d in enumerate(docs):
            ctx, conts, choices, gold, mc = make_doc(d, kind)
            s = samples[si]
            si += 1
            ck.eq("%s doc %d: task, doc_id" % (name, i), (s["task"], s["doc_id"]), (name, i))
            res = []
            for j, c in enumerate(conts):
                ce, co = encode_pair(enc, ctx, c)
                ck.eq("%s doc %d request %d tokens" % (name, i, j), s["tokens"][j], [len(ce), len(co)])
                ll, g = model.score(ce, co)
                ck.close("%s doc %d request %d loglikelihood" % (name, i, j), s["loglikelihoods"][j], ll, a.tol)
                ck.eq("%s doc %d request %d is_greedy" % (name, i, j), s["is_greedy"][j], g)
                worst = max(worst, abs(s["loglikelihoods"][j] - ll) / abs(ll))
                res.append((ll, g))
            if mc:
                l = [r[0] for r in res]
                pred = max(range(len(l)), key=lambda k: (l[k], -k))
                norm = [l[k] / len(choices[k]) for k in range(len(l))]
                pred_n = max(range(len(l)), key=lambda k: (norm[k], -k))
                acc.append(1.0 if pred == gold else 0.0)
                acc_norm.append(1.0 if pred_n == gold else 0.0)
            else:
                acc.append(float(res[0][1]))
                lls.append(res[0][0])
        r = results[name]
        ck.close(name + " acc", r["acc,none"], mean(acc), 1e-12)
        if len(acc) > 1:
            ck.close(name + " acc_stderr", r["acc_stderr,none"], mean_stderr(acc), 1e-9)
        print("# %s (%s, %d examples): acc %.4f" % (name, kind, len(docs), mean(acc)), end="")
        if acc_norm:
            ck.close(name + " acc_norm", r["acc_norm,none"], mean(acc_norm), 1e-12)
            if len(acc) > 1:
                ck.close(name + " acc_norm_stderr", r["acc_norm_stderr,none"], mean_stderr(acc_norm), 1e-9)
            print(", acc_norm %.4f" % mean(acc_norm), end="")
        else:
            # ll within tol relative -> log(ppl) within tol * mean|ll|
            ptol = math.expm1(a.tol * mean([abs(x) for x in lls]) * 2)
            ck.close(name + " perplexity", r["perplexity,none"], perplexity(lls), ptol)
            if len(lls) > 1:
                mine = [s["loglikelihoods"][0] for s in samples[si - len(docs): si]]
                ck.close(name + " perplexity_stderr (bootstrap of mgt's own lls)", r["perplexity_stderr,none"],
                         bootstrap_stderr(perplexity, mine, a.bootstrap_iters), 1e-9)
                ck.close(name + " perplexity_stderr", r["perplexity_stderr,none"],
                         bootstrap_stderr(perplexity, lls, a.bootstrap_iters), 10 * ptol)
            print(", perplexity %.6g" % perplexity(lls), end="")
        print()
    ck.eq("sample lines", len(samples), si)
    print("# largest loglikelihood difference: %.2e relative" % worst)


def run_perplexity(a, model, enc, ck):
    out = [json.loads(l) for l in open(a.output)]
    texts = [json.loads(l)[a.text_key] for l in open(a.texts)]
    texts = texts[: a.limit] if a.limit else texts
    ll = tok = words = nbytes = 0
    worst = 0.0
    for i, t in enumerate(texts):
        ids = enc.encode(t)
        x, w = model.rolling(ids)
        o = out[i]
        want = {"doc": i, "tokens": len(ids), "words": len(re.split(r"\s+", t)), "bytes": len(t.encode("utf-8")),
                "windows": w}
        ck.eq("doc %d counts" % i, {k: o[k] for k in want}, want)
        ck.close("doc %d loglikelihood" % i, o["loglikelihood"], x, a.tol)
        worst = max(worst, abs(o["loglikelihood"] - x) / abs(x))
        ll, tok, words, nbytes = ll + x, tok + len(ids), words + want["words"], nbytes + want["bytes"]
    tot = out[len(texts)]["total"]
    ck.eq("total counts", [tot[k] for k in ("documents", "tokens", "words", "bytes")], [len(texts), tok, words, nbytes])
    tol = math.expm1(2 * a.tol * abs(ll) / min(tok, words, nbytes))
    for k, v in (("perplexity", math.exp(-ll / tok)), ("word_perplexity", math.exp(-ll / words)),
                 ("byte_perplexity", math.exp(-ll / nbytes)), ("bits_per_byte", -ll / nbytes / math.log(2))):
        ck.close("total " + k, tot[k], v, tol)
    print("# %d documents, %d tokens: perplexity %.6g, word_perplexity %.6g, bits_per_byte %.6g; largest "
          "loglikelihood difference %.2e relative" % (len(texts), tok, math.exp(-ll / tok), math.exp(-ll / words),
                                                      -ll / nbytes / math.log(2), worst))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=("tasks", "perplexity"))
    p.add_argument("hf_dir")
    p.add_argument("vocab")
    p.add_argument("merges")
    p.add_argument("--task", action="append", default=[])
    p.add_argument("--task-type", default="auto")
    p.add_argument("--limit", type=int, default=0)
    p.add_argument("--max-length", type=int, required=True)
    p.add_argument("--bootstrap-iters", type=int, default=100000)
    p.add_argument("--results")
    p.add_argument("--samples")
    p.add_argument("--texts")
    p.add_argument("--text-key", default="text")
    p.add_argument("--output")
    p.add_argument("--tol", type=float, default=1e-5)
    a = p.parse_args()
    model, enc, ck = Model(a.hf_dir, a.max_length), gpt2_bpe.Encoder(a.vocab, a.merges), Check()
    (run_tasks if a.mode == "tasks" else run_perplexity)(a, model, enc, ck)
    if ck.bad:
        print("# %d differences" % ck.bad)
    return 1 if ck.bad else 0


if __name__ == "__main__":
    sys.exit(main())
