/* lib/ckpt: checksums.json, the iteration directory's manifest of XXH3-64 checksums (see
 * ckpt_impl.h and mgt-ckpt(5)):
 *   {"algorithm": "xxh3_64",
 *    "files": {"metadata.json": HEX, "model.h5": HEX, ...},
 *    "shards": {SHARD: {TENSOR: {"dtype": "float32", "shape": [...], "global_shape": [...],
 *                                "global_offset": [...], "xxh3_64": HEX}, ...}, ...}}
 * HEX: 16 lowercase hex digits.  A piece's xxh3_64 is that of its data bytes as stored
 * (little-endian, row-major), also kept as the dataset's attribute xxh3_64 (uint64), which is
 * how rank 0 learns the other ranks' checksums at commit. */
#include "ckpt/ckpt_impl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#define ALGO "xxh3_64"

static json_t *shape_json(int n, const int64_t *d)
{
	json_t *a = json_array();
	for (int i = 0; a && i < n; i++)
		json_array_append_new(a, json_integer(d[i]));
	return a;
}

static json_t *hex_json(uint64_t v)
{
	char h[17];
	mgt_xxh3_hex(v, h);
	return json_string(h);
}

json_t *ck_sums_new(void)
{
	json_t *s = json_pack("{s:s, s:{}, s:{}}", "algorithm", ALGO, "files", "shards");
	if (!s)
		mgt_err(MGT_ERR_NOMEM, "out of memory");
	return s;
}

mgt_status ck_sums_add_piece(json_t *sums, const char *file, const ck_piece *p)
{
	json_t *shards = json_object_get(sums, "shards"), *sh = json_object_get(shards, file);
	if (!sh && json_object_set_new(shards, file, sh = json_object()))
		return mgt_err(MGT_ERR_NOMEM, "out of memory");
	json_t *e = json_pack("{s:s, s:o, s:o, s:o, s:o}", "dtype", mgt_ckpt_dtype_name(p->dtype),
			      "shape", shape_json(p->ndim, p->shape), "global_shape",
			      shape_json(p->ndim, p->gshape), "global_offset", shape_json(p->ndim, p->off),
			      ALGO, hex_json(p->hash));
	if (!e || json_object_set_new(sh, p->name, e))
		return mgt_err(MGT_ERR_NOMEM, "out of memory");
	return MGT_OK;
}

static bool shape_eq(json_t *a, int n, const int64_t *d)
{
	if (!json_is_array(a) || (int)json_array_size(a) != n)
		return false;
	for (int i = 0; i < n; i++)
		if (!json_is_integer(json_array_get(a, (size_t)i)) ||
		    json_integer_value(json_array_get(a, (size_t)i)) != d[i])
			return false;
	return true;
}

static mgt_status damaged(const char *dir, const char *file, const char *what)
{
	return mgt_err(MGT_ERR_FORMAT, "%s/%s: %s (the file is damaged: its bytes differ from those "
		       "saved)", dir, file, what);
}

mgt_status ck_sums_check_piece(json_t *sums, const char *dir, const char *file, const ck_piece *p)
{
	char what[512];
	json_t *e = json_object_get(json_object_get(json_object_get(sums, "shards"), file), p->name);
	const char *h = json_string_value(json_object_get(e, ALGO));
	uint64_t v = 0;
	if (!e)
		snprintf(what, sizeof what, "tensor %s is not in %s", p->name, MGT_CKPT_SUMS_FILE);
	else if (!p->has_hash || !h || !mgt_xxh3_parse(h, &v) || v != p->hash)
		snprintf(what, sizeof what, "tensor %s: its checksum attribute differs from %s", p->name,
			 MGT_CKPT_SUMS_FILE);
	else if (strcmp(json_string_value(json_object_get(e, "dtype")) ?: "", mgt_ckpt_dtype_name(p->dtype)) ||
		 !shape_eq(json_object_get(e, "shape"), p->ndim, p->shape) ||
		 !shape_eq(json_object_get(e, "global_shape"), p->ndim, p->gshape) ||
		 !shape_eq(json_object_get(e, "global_offset"), p->ndim, p->off))
		snprintf(what, sizeof what, "tensor %s: its dtype, shape or place differs from %s", p->name,
			 MGT_CKPT_SUMS_FILE);
	else
		return MGT_OK;
	return damaged(dir, file, what);
}

mgt_status ck_sums_check_shards(json_t *sums, const ck_index *ix, const size_t *per_file)
{
	json_t *shards = json_object_get(sums, "shards"), *v;
	const char *name;
	size_t listed = 0;
	for (size_t i = 0; i < ix->nfiles; i++) {
		json_t *sh = json_object_get(shards, ix->files[i]);
		if (!sh)
			return damaged(ix->dir, ix->files[i], "shard file not in " MGT_CKPT_SUMS_FILE);
		if (json_object_size(sh) != per_file[i])
			return damaged(ix->dir, ix->files[i], "a tensor listed in " MGT_CKPT_SUMS_FILE
				       " is missing");
	}
	json_object_foreach(shards, name, v) {
		bool found = false;
		for (size_t i = 0; i < ix->nfiles && !found; i++)
			found = !strcmp(ix->files[i], name);
		if (!found)
			return mgt_err(MGT_ERR_FORMAT, "%s/%s: shard file listed in %s is missing", ix->dir,
				       name, MGT_CKPT_SUMS_FILE);
		listed++;
	}
	return listed == ix->nfiles ? MGT_OK :
	       mgt_err(MGT_ERR_FORMAT, "%s/%s: bad shard list", ix->dir, MGT_CKPT_SUMS_FILE);
}

/* XXH3-64 of a whole file, streamed. */
static mgt_status file_hash(const char *path, uint64_t *out)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat sb;
	mgt_status st = fd < 0 || fstat(fd, &sb) ? mgt_err(MGT_ERR_FORMAT, "%s: cannot open", path) :
			mgt_xxh3_fd(fd, (uint64_t)sb.st_size, path, out);
	if (fd >= 0)
		close(fd);
	return st == MGT_ERR_IO ? MGT_ERR_FORMAT : st;
}

/* Add dir/rel (a file) or everything under it (a directory) to "files"; rel "" is dir itself,
 * where the shards and the manifest are skipped. */
static mgt_status add_tree(json_t *sums, const char *dir, const char *rel)
{
	char *path = rel[0] ? ck_join(dir, rel) : ck_join(dir, NULL);
	if (!path)
		return MGT_ERR_NOMEM;
	mgt_status st = MGT_OK;
	if (!ck_is_dir(path)) {
		uint64_t v;
		st = file_hash(path, &v);
		if (!st && json_object_set_new(json_object_get(sums, "files"), rel, hex_json(v)))
			st = mgt_err(MGT_ERR_NOMEM, "out of memory");
		free(path);
		return st;
	}
	DIR *d = opendir(path);
	if (!d)
		st = mgt_err(MGT_ERR_IO, "%s: cannot open directory: %s", path, strerror(errno));
	for (struct dirent *e; !st && (e = readdir(d));) {
		if (e->d_name[0] == '.' || (!rel[0] && (ck_is_shard_name(e->d_name) ||
							!strcmp(e->d_name, MGT_CKPT_SUMS_FILE))))
			continue;
		char *sub = rel[0] ? ck_join(rel, e->d_name) : mgt_strdup(e->d_name);
		st = sub ? add_tree(sums, dir, sub) : MGT_ERR_NOMEM;
		free(sub);
	}
	if (d)
		closedir(d);
	free(path);
	return st;
}

mgt_status ck_sums_add_files(json_t *sums, const char *dir) { return add_tree(sums, dir, ""); }

mgt_status ck_sums_write(json_t *sums, const char *dir)
{
	char *path = ck_join(dir, MGT_CKPT_SUMS_FILE);
	char *text = path ? json_dumps(sums, JSON_INDENT(1) | JSON_SORT_KEYS) : NULL;
	mgt_status st = text ? ck_write_file(path, text, strlen(text)) : mgt_err(MGT_ERR_NOMEM, "out of memory");
	free(text);
	free(path);
	return st;
}

mgt_status ck_sums_read(const char *dir, json_t **out)
{
	*out = NULL;
	char *path = ck_join(dir, MGT_CKPT_SUMS_FILE);
	if (!path)
		return MGT_ERR_NOMEM;
	mgt_status st = MGT_OK;
	if (ck_exists(path)) {
		json_error_t e;
		*out = json_load_file(path, JSON_REJECT_DUPLICATES, &e);
		const char *algo = json_string_value(json_object_get(*out, "algorithm"));
		if (!*out)
			st = mgt_err(MGT_ERR_FORMAT, "%s: not valid JSON (line %d: %s): the file is damaged",
				     path, e.line, e.text);
		else if (!algo || strcmp(algo, ALGO) || !json_is_object(json_object_get(*out, "files")) ||
			 !json_is_object(json_object_get(*out, "shards")))
			st = mgt_err(MGT_ERR_FORMAT, "%s: expected {\"algorithm\": \"%s\", \"files\": {...}, "
				     "\"shards\": {...}} (damaged?)", path, ALGO);
	}
	if (st) {
		json_decref(*out);
		*out = NULL;
	}
	free(path);
	return st;
}

mgt_status ck_sums_check_files(json_t *sums, const char *dir)
{
	const char *name;
	json_t *v;
	json_object_foreach(json_object_get(sums, "files"), name, v) {
		uint64_t want, have;
		char *path = ck_join(dir, name);
		if (!path)
			return MGT_ERR_NOMEM;
		mgt_status st = name[0] == '/' || strstr(name, "..") ?
			mgt_err(MGT_ERR_FORMAT, "%s/%s: bad file name %s", dir, MGT_CKPT_SUMS_FILE, name) :
			!ck_exists(path) ? mgt_err(MGT_ERR_FORMAT, "%s: missing (listed in %s)", path, MGT_CKPT_SUMS_FILE) :
			file_hash(path, &have);
		free(path);
		if (st)
			return st;
		if (!mgt_xxh3_parse(json_string_value(v), &want) || want != have)
			return damaged(dir, name, "its checksum differs from " MGT_CKPT_SUMS_FILE "'s");
	}
	return MGT_OK;
}
