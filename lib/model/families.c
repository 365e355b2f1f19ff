/* lib/model/families.c: the families as data: mgt's model families (mgt_family in model.h:
 * recipe, heads, what their layers allow) and the Hugging Face families (mgt_hf_spec; mgt-hf(5)).
 *
 * One Hugging Face row per family: its config.json names, its naming scheme, its Mixture-of-Experts block,
 * its attention extras and its GGUF architecture.  hf.c (tensor names and layouts),
 * lib/convert/hfconfig.c (config.json both ways) and lib/convert/export.c (GGUF) read the row's
 * fields; none of them names a family.  Sources: transformers' models/<family>/
 * configuration_<family>.py and modeling_<family>.py; llama.cpp's convert_hf_to_gguf.py
 * (model classes' model_arch, LlamaModel.permute). */
#include "model.h"

#include <string.h>

static const mgt_hf_spec specs[MGT_HF_NFAMILIES] = {
	[MGT_HF_GPT2] = {"gpt2", "GPT2LMHeadModel", MGT_HF_NAMES_GPT2, MGT_HF_MOE_NONE, false, false,
			 MGT_HF_QKV_BIAS_NONE, "gpt2", false},
	[MGT_HF_LLAMA] = {"llama", "LlamaForCausalLM", MGT_HF_NAMES_LLAMA, MGT_HF_MOE_NONE, false, false,
			  MGT_HF_QKV_BIAS_NONE, "llama", true},
	[MGT_HF_MISTRAL] = {"mistral", "MistralForCausalLM", MGT_HF_NAMES_LLAMA, MGT_HF_MOE_NONE, false, false,
			    MGT_HF_QKV_BIAS_NONE, "llama", true},
	[MGT_HF_QWEN2] = {"qwen2", "Qwen2ForCausalLM", MGT_HF_NAMES_LLAMA, MGT_HF_MOE_NONE, false, false,
			  MGT_HF_QKV_BIAS_ALWAYS, "qwen2", false},
	[MGT_HF_QWEN3] = {"qwen3", "Qwen3ForCausalLM", MGT_HF_NAMES_LLAMA, MGT_HF_MOE_NONE, false, true,
			  MGT_HF_QKV_BIAS_NONE, "qwen3", false},
	[MGT_HF_MIXTRAL] = {"mixtral", "MixtralForCausalLM", MGT_HF_NAMES_LLAMA, MGT_HF_MOE_MIXTRAL, false, false,
			    MGT_HF_QKV_BIAS_NONE, "llama", false},
	[MGT_HF_QWEN2_MOE] = {"qwen2_moe", "Qwen2MoeForCausalLM", MGT_HF_NAMES_LLAMA, MGT_HF_MOE_QWEN, true, false,
			      MGT_HF_QKV_BIAS_KEY, "qwen2moe", false},
	[MGT_HF_QWEN3_MOE] = {"qwen3_moe", "Qwen3MoeForCausalLM", MGT_HF_NAMES_LLAMA, MGT_HF_MOE_QWEN, false, true,
			      MGT_HF_QKV_BIAS_NONE, "qwen3moe", false},
	[MGT_HF_MEGATRON_BERT] = {"megatron-bert", "MegatronBertForPreTraining", MGT_HF_NAMES_BERT, MGT_HF_MOE_NONE,
				  false, false, MGT_HF_QKV_BIAS_ALWAYS, NULL, false},
	/* hybrid models: llama.cpp's nemotron_h (conversion/nemotron.py); an all-Mamba model goes to
	 * GGUF as mamba2 whichever of the two holds it (export.c) */
	[MGT_HF_NEMOTRON_H] = {"nemotron_h", "NemotronHForCausalLM", MGT_HF_NAMES_BACKBONE, MGT_HF_MOE_NONE, false, false,
			       MGT_HF_QKV_BIAS_NONE, "nemotron_h", false},
	[MGT_HF_MAMBA2] = {"mamba2", "Mamba2ForCausalLM", MGT_HF_NAMES_BACKBONE, MGT_HF_MOE_NONE, false, false,
			   MGT_HF_QKV_BIAS_NONE, "mamba2", false},
};

const mgt_hf_spec *mgt_hf_spec_of(mgt_hf_family f) { return &specs[f]; }
const char *mgt_hf_model_type(mgt_hf_family f) { return specs[f].model_type; }
const char *mgt_hf_architecture(mgt_hf_family f) { return specs[f].architecture; }

mgt_status mgt_hf_family_parse(const char *model_type, mgt_hf_family *f)
{
	for (int i = 0; i < MGT_HF_NFAMILIES; i++)
		if (model_type && !strcmp(model_type, specs[i].model_type)) {
			*f = (mgt_hf_family)i;
			return MGT_OK;
		}
	if (model_type && !strcmp(model_type, "bert"))
		return mgt_err(MGT_ERR_USAGE, "model_type \"bert\" (BertForPreTraining) is not supported: it is post-LN (a "
			       "LayerNorm after the embeddings and after each residual sum), which no Megatron-Core BERT "
			       "computes; megatron-bert (MegatronBertForPreTraining) is the pre-LN layout mgt converts");
	return mgt_err(MGT_ERR_USAGE, "model_type \"%s\" is not supported (expected gpt2, llama, mistral, qwen2, qwen3, "
		       "mixtral, qwen2_moe, qwen3_moe, megatron-bert, nemotron_h or mamba2)",
		       model_type ? model_type : "(none)");
}

/* ---- mgt's model families ---- */

static const mgt_family families[] = {
	{"gpt", "GPT", MGT_STACK_DECODER, true, false, false, MGT_HF_FROM_LAYERS, false},
	{"bert", "BERT", MGT_STACK_ENCODER, false, false, true, MGT_HF_MEGATRON_BERT, true},
	{"t5", "T5", MGT_STACK_ENCODER_DECODER, false, true, false, MGT_HF_NONE, true},
	{"hybrid", "hybrid", MGT_STACK_DECODER, true, false, false, MGT_HF_NEMOTRON_H, false},
};

const mgt_family *mgt_family_find(const char *name)
{
	if (!name[0]) return &families[0];
	for (size_t i = 0; i < sizeof families / sizeof families[0]; i++)
		if (!strcmp(name, families[i].name)) return &families[i];
	return NULL;
}

const mgt_family *mgt_model_family(const mgt_model_config *c)
{
	const mgt_family *f = mgt_family_find(c->family);
	return f ? f : &families[0];
}

const char *mgt_model_family_names(void) { return "gpt, bert, t5 or hybrid"; }

bool mgt_model_is_bert(const mgt_model_config *c) { return !strcmp(c->family, "bert"); }
bool mgt_model_is_t5(const mgt_model_config *c) { return !strcmp(c->family, "t5"); }
