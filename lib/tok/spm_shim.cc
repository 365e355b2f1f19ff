// lib/tok/spm_shim.cc: see spm_shim.h. The only C++ in lib/; it converts, it decides nothing.
// Facts from sentencepiece_processor.h (libsentencepiece 0.1.97) and sentencepiece_model.proto.
#include "spm_shim.h"

#include <sentencepiece_processor.h>

#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <vector>

struct tok_spm {
	sentencepiece::SentencePieceProcessor sp;
};

static void set_err(char *err, size_t errlen, const std::string &msg)
{
	if (!err || !errlen)
		return;
	size_t n = msg.size() < errlen - 1 ? msg.size() : errlen - 1;
	std::memcpy(err, msg.data(), n);
	err[n] = 0;
}

// Run f, mapping a non-ok Status and every exception to the C return codes.
template <class F> static int guarded(F f, char *err, size_t errlen)
{
	try {
		sentencepiece::util::Status st = f();
		if (st.ok())
			return TOK_SPM_OK;
		set_err(err, errlen, st.ToString());
		return TOK_SPM_ERR;
	} catch (const std::bad_alloc &) {
		set_err(err, errlen, "out of memory");
		return TOK_SPM_NOMEM;
	} catch (const std::exception &e) {
		set_err(err, errlen, e.what());
		return TOK_SPM_ERR;
	} catch (...) {
		set_err(err, errlen, "unknown C++ exception");
		return TOK_SPM_ERR;
	}
}

extern "C" int tok_spm_open(const char *path, tok_spm **out, char *err, size_t errlen)
{
	tok_spm *s = new (std::nothrow) tok_spm;
	if (!s) {
		set_err(err, errlen, "out of memory");
		return TOK_SPM_NOMEM;
	}
	int r = guarded([&] { return s->sp.Load(path); }, err, errlen);
	if (r) {
		delete s;
		return r;
	}
	*out = s;
	return TOK_SPM_OK;
}

extern "C" void tok_spm_close(tok_spm *s) { delete s; }

extern "C" int32_t tok_spm_size(const tok_spm *s) { return s->sp.GetPieceSize(); }

extern "C" const char *tok_spm_piece(const tok_spm *s, int32_t id, size_t *len)
{
	const std::string &p = s->sp.IdToPiece(id);
	*len = p.size();
	return p.data();
}

extern "C" float tok_spm_score(const tok_spm *s, int32_t id) { return s->sp.GetScore(id); }

extern "C" int tok_spm_kind(const tok_spm *s, int32_t id)
{
	if (s->sp.IsUnknown(id))
		return TOK_SPM_UNKNOWN;
	if (s->sp.IsControl(id))
		return TOK_SPM_CONTROL;
	if (s->sp.IsUnused(id))
		return TOK_SPM_UNUSED;
	if (s->sp.IsByte(id))
		return TOK_SPM_BYTE;
	return TOK_SPM_NORMAL;
}

extern "C" void tok_spm_specials(const tok_spm *s, int32_t *bos, int32_t *eos, int32_t *unk, int32_t *pad)
{
	*bos = s->sp.bos_id(), *eos = s->sp.eos_id(), *unk = s->sp.unk_id(), *pad = s->sp.pad_id();
}

extern "C" int tok_spm_encode(const tok_spm *s, const char *text, size_t len, int32_t **ids, size_t *n, char *err,
			      size_t errlen)
{
	std::vector<int> v;
	int r = guarded([&] { return s->sp.Encode(std::string_view(text, len), &v); }, err, errlen);
	if (r)
		return r;
	*ids = static_cast<int32_t *>(std::malloc((v.size() + 1) * sizeof(int32_t)));
	if (!*ids) {
		set_err(err, errlen, "out of memory");
		return TOK_SPM_NOMEM;
	}
	for (size_t i = 0; i < v.size(); i++)
		(*ids)[i] = v[i];
	*n = v.size();
	return TOK_SPM_OK;
}

extern "C" int tok_spm_decode(const tok_spm *s, const int32_t *ids, size_t n, char **text, size_t *len, char *err,
			      size_t errlen)
{
	std::string out;
	int r = guarded(
		[&] {
			std::vector<int> v(ids, ids + n);
			return s->sp.Decode(v, &out);
		},
		err, errlen);
	if (r)
		return r;
	*text = static_cast<char *>(std::malloc(out.size() + 1));
	if (!*text) {
		set_err(err, errlen, "out of memory");
		return TOK_SPM_NOMEM;
	}
	std::memcpy(*text, out.data(), out.size());
	(*text)[out.size()] = 0;
	*len = out.size();
	return TOK_SPM_OK;
}
