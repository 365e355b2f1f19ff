#!/usr/bin/python3
"""Make the shipped KJV zero-shot tasks (share/mgt/tasks/, mgt-tasks(5)) from held-out chapters.

usage: contrib/make-kjv-tasks.py [KJV.jsonl.zst [OUTDIR]]   (defaults: share/mgt/data/kjv.jsonl.zst,
                                                            share/mgt/tasks)
Held out: the chapters contrib/demo.sh's model does not train on.  demo.sh trains with --split
969,30,1 on one document per chapter (1,189, in file order); Megatron's split gives the train
split documents [0, round(0.969 N)) = [0, 1152), valid [1152, round(0.999 N)) = [1152, 1188) and
test [1188, 1189) (megatron/core/datasets/utils.py get_split_indices: cumulative fractions times
N, rounded).  Both valid and test are never trained on; the test split alone is one chapter (21
verses), too few, so the tasks draw from all 37 held-out chapters (1 Peter 2 .. Revelation 22).

kjv-cloze.jsonl   LAMBADA schema {"text"}: a verse of at least 8 words; the model must predict its
                  last space-separated word (punctuation included), as lambada_openai.
kjv-choice.jsonl  {"id", "context", "choices", "gold"}: the first half of a verse's words, its true
                  second half and the second halves of 3 other held-out verses (HellaSwag-style).
Deterministic: every fourth eligible verse, at most 100 per task; distractors and the position of
the true ending from random.Random(15).
"""
import json
import os
import random
import re
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def held_out(docs, split="969,30,1"):
    v = [float(x) for x in re.findall(r"[.0-9]+", split)]
    v = [x / sum(v) for x in v]
    beg = round(v[0] * len(docs))  # Python round: half to even, as Megatron's
    return docs[beg:], beg


def verses(doc):
    for line in doc["text"].split("\n"):
        m = re.match(r"^(\d+) (.*)$", line)
        if m:
            yield "%s:%s" % (doc["id"], m.group(1)), m.group(2).strip()


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "share/mgt/data/kjv.jsonl.zst")
    out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "share/mgt/tasks")
    text = subprocess.run(["zstd", "-dcq", src], check=True, capture_output=True).stdout.decode("utf-8")
    docs = [json.loads(l) for l in text.split("\n") if l]
    held, beg = held_out(docs)
    vs = [(i, t) for d in held for i, t in verses(d) if len(t.split(" ")) >= 8][::4][:100]
    rnd = random.Random(15)
    with open(os.path.join(out, "kjv-cloze.jsonl"), "w") as f:
        for i, t in vs:
            f.write(json.dumps({"id": i, "text": t}) + "\n")
    halves = []
    for i, t in vs:
        w = t.split(" ")
        halves.append((i, " ".join(w[: len(w) // 2]), " ".join(w[len(w) // 2:])))
    with open(os.path.join(out, "kjv-choice.jsonl"), "w") as f:
        for k, (i, ctx, end) in enumerate(halves):
            others = rnd.sample([h[2] for j, h in enumerate(halves) if j != k], 3)
            gold = rnd.randrange(4)
            choices = others[:gold] + [end] + others[gold:]
            f.write(json.dumps({"id": i, "context": ctx, "choices": choices, "gold": gold}) + "\n")
    print("held-out chapters %d..%d of %d (%s .. %s): %d examples a task" %
          (beg, len(docs) - 1, len(docs), held[0]["id"], held[-1]["id"], len(vs)), file=sys.stderr)


if __name__ == "__main__":
    main()
