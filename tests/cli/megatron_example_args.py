#!/usr/bin/python3
"""Turn one of Megatron-LM's example argument lists (shared/data/megatron/examples/*.args: one
flag with its value a line, shell variables left as written) into an mgt-train command line for a
CI machine: shell variables and paths replaced, sizes shrunk, every other flag and value kept as
the script passes it.  Flags named with --drop are left out (the refused ones, tested apart).

  megatron_example_args.py FILE.args --data PREFIX --vocab V --merges M --tokenizer-json J
      --dir OUTDIR [--drop FLAG]...    -> the arguments, one a line, on stdout
"""
import argparse
import re
import shlex

# Sizes shrunk to run in seconds on 2 cores; everything else as written.
SHRINK = {
    "--num-layers": "2", "--hidden-size": "64", "--ffn-hidden-size": "128", "--num-attention-heads": "4",
    "--num-query-groups": "2", "--kv-channels": "16", "--seq-length": "64", "--max-position-embeddings": "64",
    "--micro-batch-size": "1", "--global-batch-size": "4", "--train-iters": "4", "--train-samples": "16",
    "--lr-decay-iters": "4", "--lr-decay-samples": "16", "--lr-warmup-samples": "4", "--lr-warmup-iters": "1",
    "--tensor-model-parallel-size": "1", "--pipeline-model-parallel-size": "1", "--context-parallel-size": "1",
    "--expert-model-parallel-size": "1", "--log-interval": "1", "--save-interval": "2", "--eval-interval": "2",
    "--eval-iters": "1", "--exit-duration-in-mins": "30", "--vocab-size": "50257",
    "--encoder-num-layers": "2", "--decoder-num-layers": "2", "--encoder-seq-length": "64",
    "--decoder-seq-length": "32",
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    for k in ("--data", "--vocab", "--merges", "--tokenizer-json", "--dir"):
        ap.add_argument(k, required=True)
    ap.add_argument("--drop", action="append", default=[])
    o = ap.parse_args()
    paths = {"DATA_PATH": o.data, "DATA_ARG": o.data, "VOCAB_FILE": o.vocab, "MERGE_FILE": o.merges,
             "TOKENIZER_ARG": o.tokenizer_json, "TOKENIZER_MODEL": o.tokenizer_json,
             "CHECKPOINT_PATH": o.dir + "/ckpt", "TENSORBOARD_LOGS_PATH": o.dir + "/tb", "TENSORBOARD_DIR": o.dir + "/tb",
             "DATA_CACHE_PATH": o.dir + "/cache", "WANDB_PROJECT": "mgt", "WANDB_NAME": "mgt"}

    def subst(v):
        v = re.sub(r'\$\{(\w+):-"?([^}"]*)"?\}', lambda m: paths.get(m.group(1), m.group(2)), v)
        return re.sub(r"\$\{?(\w+)\}?", lambda m: paths.get(m.group(1), "1"), v)

    out = []
    for line in open(o.file):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.count('"') % 2:                  # the scripts' array syntax leaves stray quotes
            line = line[::-1].replace('"', "", 1)[::-1].strip()
        words = shlex.split(line)
        flag, vals = words[0], [subst(w) for w in words[1:]]
        if flag in o.drop:
            continue
        if flag in SHRINK and vals:
            vals = [SHRINK[flag]]
        out += [flag] + vals
    print("\n".join(out))


main()
