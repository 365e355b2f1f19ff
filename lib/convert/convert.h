/* lib/convert: Hugging Face model directories to and from mgt checkpoints (mgt-ckpt-convert(1),
 * mgt-hf(5)).
 *
 * A Hugging Face directory is config.json, model.safetensors (or shards with
 * model.safetensors.index.json), generation_config.json and tokenizer files.  An mgt checkpoint
 * is mgt-ckpt(5): the converter writes iteration 0 with the parameters only (fp32 master
 * weights; no optimizer state), under any tensor/pipeline layout, as mgt-train saves them, and
 * records the run arguments derived from config.json ("args"), the original config.json and
 * generation_config.json ("hf"), and the tokenizer; the tokenizer and config files are copied to
 * SAVE/hf/.  mgt-train --load SAVE --finetune and mgt-eval load it.
 *
 * Both directions stream tensor by tensor: peak memory is about two copies of the largest
 * tensor (the embedding), not the model; Hugging Face -> mgt holds an expert dataset
 * [E, rows, cols] (all experts of one expert tensor, as mgt-ckpt(5) stores it) whole, which
 * counts as one tensor there.  Mixture-of-Experts models (Mixtral, Qwen2-MoE, Qwen3-MoE) are
 * written with the expert layout of expert-parallel size ep: the data-parallel ranks 0..ep-1
 * each hold their E/ep experts (files model_tpTT_ppPPP_dpDDD with DDD the expert-parallel rank),
 * the dense rows are on rank 0, as mgt-train saves them; any run reshards them.  The tensor names and layouts come from the tensor table
 * and its Hugging Face rules (lib/model/hf.c), Megatron's conventions: query-group-interleaved linear_qkv
 * (megatron/core/transformer/attention.py), SwiGLU fc1 as [gate; up] (megatron/core/transformer/
 * mlp.py), vocabulary padding (megatron/training/tokenizer/tokenizer.py _vocab_size_with_padding).
 * Values are copied bit for bit: bf16/fp16 widen exactly to fp32 on the way in and round back
 * exactly on the way out.
 *
 * Outputs are built under OUT.tmp.PID and renamed to OUT when complete; an existing OUT is
 * refused (MGT_ERR_EXISTS); a failure removes the temporary.
 */
#ifndef MGT_CONVERT_H
#define MGT_CONVERT_H

#include <stdint.h>
#include <stdio.h>

#include "ckpt/ckpt.h"
#include "tok/tok.h"
#include "util/util.h"

typedef struct {
	const char *load_dir;         /* input: HF directory or mgt save directory */
	const char *save_dir;         /* output directory (must not exist) */
	int tp, pp;                   /* HF -> mgt: target tensor / pipeline parallel sizes (>= 1) */
	int ep;                       /* HF -> mgt: target expert parallel size (0 = 1); > 1 needs experts */
	int64_t make_vocab_size_divisible_by; /* HF -> mgt: 0 = 128 (Megatron's default) */
	const char *dtype;            /* mgt -> HF: "bf16", "fp16", "fp32" or NULL (config.json's torch_dtype, else fp32) */
	const char *save_format;      /* mgt -> Megatron: "torch" (NULL) or "torch_dist" */
	bool distopt;                 /* mgt -> Megatron torch: Adam's state as the distributed optimizer's */
	const char *family;           /* mgt -> HF without recorded config.json: model_type, or NULL (inferred) */
	int64_t ckpt_step;            /* mgt or Megatron -> HF or mgt: iteration to read, -1 = the tracker's */
	uint64_t max_shard_bytes;     /* mgt -> HF: safetensors shard size (0 = 5 GB, as transformers) */
	const mgt_tok_opts *tok;      /* mgt -> HF: the tokenizer flags applied to the checkpoint's
				       * (mgt_tok_opts_apply), or NULL */
	FILE *log;                    /* progress and warnings, or NULL */
} mgt_convert_opts;

/* Which way load_dir goes: 1 a Hugging Face directory (config.json), 2 an mgt save directory
 * (latest_checkpointed_iteration.txt or iter_NNNNNNN/), 3 a Megatron-LM checkpoint (mgt-megatron(5):
 * a save directory whose tracker's iteration holds mp_rank_* rank files (`--ckpt-format torch`)
 * or .metadata (`torch_dist`), or such an iteration directory itself).  Errors: MGT_ERR_USAGE
 * (none of them, naming the directory and what was looked for), MGT_ERR_IO. */
mgt_status mgt_convert_detect(const char *load_dir, int *kind);

/* Hugging Face -> mgt.  Errors: MGT_ERR_USAGE (unsupported family, activation, rope_scaling type;
 * a layout that does not divide, ep > 1 for a dense model), MGT_ERR_INPUT (config.json unreadable or missing a key, a
 * tensor missing, unexpected, of a shape config.json contradicts, or holding NaN/inf, naming the
 * file and tensor), MGT_ERR_FORMAT (safetensors malformed), MGT_ERR_EXISTS (save_dir exists),
 * MGT_ERR_IO, MGT_ERR_NOMEM. */
mgt_status mgt_convert_hf_to_mgt(const mgt_convert_opts *o);

/* Megatron-LM -> mgt (mgt-megatron(5)): the checkpoint in load_dir (its iteration ckpt_step, else
 * the tracker's) as an mgt checkpoint of the same iteration at layout tp x pp (x ep): weights (the
 * optimizer's fp32 main weights where saved), Adam moments when saved, progress and scheduler.
 * Errors: MGT_ERR_USAGE (what mgt does not read, naming the argument; a layout that does not
 * divide), MGT_ERR_FORMAT (a rank file missing or damaged, a tensor missing or misshapen, the
 * optimizer's layout not Megatron's, naming the file and key), MGT_ERR_EXISTS, MGT_ERR_IO,
 * MGT_ERR_NOMEM. */
mgt_status mgt_convert_megatron_to_mgt(const mgt_convert_opts *o);

/* mgt (or a Hugging Face directory read in place) -> Megatron-LM's legacy format (mgt-megatron(5)):
 * save_dir/iter_%07d/mp_rank_TT[_PPP][_EEE]/model_optim_rng.pt at layout tp x pp (x ep), the
 * weights in o->dtype (default: bf16 with the checkpoint's --bf16, fp16 with --fp16, else fp32),
 * the arguments as Megatron's Namespace, the iteration, and (legacy format, an mgt checkpoint
 * holding it, no expert-parallel optimizer) Adam's state as Megatron's non-distributed optimizer
 * saves it with the scheduler's; no RNG state.  o->save_format "torch_dist": the same in torch_dist
 * (mg_out_dist.c; the optimizer's per-tensor keys).  Errors: as mgt_convert_mgt_to_hf, MGT_ERR_USAGE for a layout that
 * does not divide. */
mgt_status mgt_convert_to_megatron(const mgt_convert_opts *o);

/* mgt -> Hugging Face.  Errors: as above, MGT_ERR_INPUT for a model no Hugging Face family holds
 * (an MoE model with a sigmoid router, expert bias, group-limited routing, top-k scaling, or one
 * the family lacks: the message names mgt-train's flag that made it so), MGT_ERR_USAGE for a
 * --family that cannot hold the model, MGT_ERR_FORMAT for a damaged checkpoint (naming the newest
 * whole iteration). */
mgt_status mgt_convert_mgt_to_hf(const mgt_convert_opts *o);

/* The model arguments a Hugging Face config.json gives (path: the file, or a directory holding
 * it) merged into *a (initialized by the caller): the model shape as mgt-ckpt-convert derives
 * it (mgt-hf(5) CONFIG KEYS) and a->vocab_size; no tensors are read.  Errors: MGT_ERR_INPUT
 * (unreadable or malformed JSON, an unsupported model_type, a missing or bad key: the message
 * names the file and key), MGT_ERR_USAGE (what mgt does not implement). */
struct mgt_args;
mgt_status mgt_convert_hf_config(const char *path, struct mgt_args *a);

/* mgt-export: an mgt checkpoint or a Hugging Face directory (load_dir) to one GGUF v3 file as
 * llama.cpp reads it (ggml docs/gguf.md; llama.cpp gguf-py names and keys; mgt-export(1)):
 * architecture gpt2 (GPT-2), llama (Llama, Mistral: q/k rows permuted for its adjacent-pair RoPE;
 * Llama 3 rope scaling as rope_freqs.weight), qwen2 or qwen3; the tokenizer embedded
 * (tokenizer.ggml.*); vocabulary padding removed.  outtype: "f32", "f16" (default), "bf16" or
 * "q8_0" for 2-D tensors (1-D ones stay f32; q8_0 needs rows that are a multiple of 32, others f16).
 * Mixture-of-Experts models are refused (MGT_ERR_USAGE, naming an expert dataset or the family).
 * The file is written as OUTPUT.tmp and renamed; an existing output is refused.
 * Errors: as mgt_convert_mgt_to_hf, MGT_ERR_VOCAB (no tokenizer, or one GGUF cannot hold),
 * MGT_ERR_EXISTS. */
typedef struct {
	const char *load_dir, *output, *outtype, *name, *family;
	int64_t ckpt_step;            /* -1: the tracker's */
	const mgt_tok_opts *tok;      /* the tokenizer flags applied to the recorded or found
				       * tokenizer (mgt_tok_opts_apply), or NULL */
	FILE *log;
} mgt_export_opts;
mgt_status mgt_export_gguf(const mgt_export_opts *o);

/* ---- model sources (lib/convert/source.c) ----------------------------------------------------
 *
 * One way to read a model's tensors, whatever holds them: an mgt checkpoint directory
 * (mgt-ckpt(5): lib/ckpt's mgt_ckpt, which reshards any box from the saved pieces) or a Hugging
 * Face directory (config.json, model.safetensors or its shards with
 * model.safetensors.index.json), read in place: nothing is written anywhere.  A Hugging Face
 * directory looks like the mgt checkpoint mgt-ckpt-convert would make of it at TP = PP = 1: the
 * same tensor names (Megatron-Core's, an expert dataset [E, rows, cols] per expert tensor), the
 * same float32 values (bf16/fp16 widened exactly; Megatron's layouts: query-group-interleaved
 * linear_qkv, SwiGLU fc1 as [gate; up], vocabulary padding; lib/model/hf.c) and the same
 * metadata.json text, but with the tokenizer files as the directory's own (NAME, not hf/NAME).
 * Each tensor is made whole when first read and kept until another is read (memory: about two
 * copies of the largest tensor, the embedding, or of the largest expert dataset).
 *
 * Use: mgt_source_open, then mgt_source_metadata / mgt_source_count / mgt_source_tensor (the
 * list) / mgt_source_read (boxes, any order), then mgt_source_close.  Not thread-safe.
 * Readers: mgt-eval (--load, --hf), mgt-train (--load, --pretrained-checkpoint), mgt-export, and
 * mgt-ckpt-convert both ways (Hugging Face -> mgt reads each tensor whole through a source over
 * its open directory, then shards it; mgt -> Hugging Face reads the checkpoint's rows). */
typedef struct mgt_source mgt_source;

/* Open dir: a Hugging Face directory (config.json) or an mgt checkpoint directory (its
 * iteration step, which needs no tracker, or with step <= 0 the tracker's; mgt_ckpt_open and
 * mgt_ckpt_check).  *out is
 * the caller's (mgt_source_close).  Errors: MGT_ERR_USAGE (neither kind, naming what was looked
 * for; a step for a Hugging Face directory), those of mgt_ckpt_open / mgt_ckpt_check, and for a
 * Hugging Face directory those of mgt_convert_hf_to_mgt's reading (MGT_ERR_INPUT for config.json
 * and a missing tensor, MGT_ERR_FORMAT for malformed safetensors), MGT_ERR_NOMEM. */
mgt_status mgt_source_open(const char *dir, int64_t step, mgt_source **out);
/* An mgt checkpoint already opened (mgt_ckpt_open, checked by the caller) as a source: s owns c
 * from the call on (closed on an error too).  Errors: MGT_ERR_NOMEM. */
mgt_status mgt_source_from_ckpt(mgt_ckpt *c, mgt_source **out);
/* 1 a Hugging Face directory, 2 an mgt checkpoint (mgt_convert_detect's numbers). */
int mgt_source_kind(const mgt_source *s);
/* The directory read (the iteration directory of a checkpoint), its metadata.json text
 * (NUL-terminated JSON object; for a Hugging Face directory the one mgt-ckpt-convert would
 * write, iteration 0), and the iteration (0 for Hugging Face).  Owned by s. */
const char *mgt_source_dir(const mgt_source *s);
const char *mgt_source_metadata(const mgt_source *s);
int64_t mgt_source_iteration(const mgt_source *s);
/* The tensors: count, and tensor i's name (owned by s; NULL past the end), ndim (1..4),
 * global shape (room for MGT_CKPT_MAX_DIM) and dtype (MGT_CKPT_F32 for Hugging Face). */
size_t mgt_source_count(const mgt_source *s);
const char *mgt_source_tensor(const mgt_source *s, size_t i, int *ndim, int64_t *global_shape,
			      mgt_ckpt_dtype *dtype);
/* Read the box [offset, offset + shape) of tensor name into dst (row-major [shape[0], ...],
 * dtype dt, caller-owned), as mgt_ckpt_read: global_shape and dt must be the listed ones (the
 * Hugging Face files' F32/F16/BF16 values come as float32).  For Hugging Face the sources are
 * checked as mgt-ckpt-convert checks them (shape against config.json, dtype, finite values).
 * Errors: those of mgt_ckpt_read; for Hugging Face MGT_ERR_FORMAT (no such tensor, another
 * shape or dtype asked), MGT_ERR_USAGE (box outside), MGT_ERR_INPUT (a source tensor missing, of
 * another shape or dtype, not finite: naming the file and tensor), MGT_ERR_IO. */
mgt_status mgt_source_read(mgt_source *s, const char *name, int ndim, const int64_t *global_shape,
			   const int64_t *offset, const int64_t *shape, mgt_ckpt_dtype dt, void *dst);
/* Table row x's local elements [lo, hi) under prefix (an optimizer moment's, or "") into dst
 * (float32, element lo at dst[0]), box by box from x's dataset as mgt_ckpt_row_read reads a
 * checkpoint (an expert row at its expert index of the expert dataset).  Errors: those of
 * mgt_source_read. */
struct mgt_tensor;
mgt_status mgt_source_row_read(mgt_source *s, const char *prefix, const struct mgt_tensor *x, size_t lo, size_t hi,
			       float *dst);
/* Close the files and free s; NULL is fine. */
void mgt_source_close(mgt_source *s);

#endif
