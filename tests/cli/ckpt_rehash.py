#!/usr/bin/python3
"""ckpt_rehash.py ITER_DIR...: after a test edited files of a checkpoint's iteration directory
on purpose (metadata.json made to look like an older mgt's, tokenizer copies removed), rewrite
checksums.json's "files" to what the directory now holds, as lib/ckpt's commit lists them
(every file but the shards and checksums.json, relative names, XXH3-64 as 16 hex digits;
mgt-ckpt(5) CHECKSUMS).  The shards' entries are left alone."""
import json
import os
import sys

import xxhash

for d in sys.argv[1:]:
    path = os.path.join(d, "checksums.json")
    s = json.load(open(path))
    files = {}
    for root, dirs, names in os.walk(d):
        dirs[:] = [x for x in dirs if not x.startswith(".")]
        for n in names:
            rel = os.path.relpath(os.path.join(root, n), d)
            top = root == d
            if n.startswith(".") or (top and (n == "checksums.json" or (n.endswith(".h5") and n != "model.h5"))):
                continue
            files[rel] = xxhash.xxh3_64_hexdigest(open(os.path.join(root, n), "rb").read())
    s["files"] = files
    json.dump(s, open(path, "w"), indent=1, sort_keys=True)
