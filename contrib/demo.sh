#!/bin/sh
# The main job on the bundled data: tokenize the King James Bible (share/mgt/data/kjv.jsonl.zst,
# 1,189 chapters) with the GPT-2 tokenizer into demo/data/kjv_text_document.{bin,idx}, a dataset
# Megatron-LM reads with --data-path demo/data/kjv_text_document, then summarize it.
set -e
cd "$(dirname "$0")/.."
mkdir -p demo/data
G=share/mgt/tokenizers/gpt2
bin/mgt-preprocess --input share/mgt/data/kjv.jsonl.zst --output-prefix demo/data/kjv \
	--tokenizer-type GPT2BPETokenizer --vocab-file $G/vocab.json --merge-file $G/merges.txt \
	--append-eod --workers 2 --overwrite
bin/mgt-dataset info demo/data/kjv_text_document
echo "first document, decoded:"
bin/mgt-dataset dump demo/data/kjv_text_document --documents 0:1 --strip-eod \
	--tokenizer-type GPT2BPETokenizer --vocab-file $G/vocab.json --merge-file $G/merges.txt | head -c 300
echo
