/* tests/sim/sim_prof.cc: the simulator's access profile (MGT_SIM_PROFILE=FILE; tests/sim/README).
 *
 * Off unless MGT_SIM_PROFILE names a file.  Then every kernel load and store that sim_mem.cc
 * checks is also recorded here with its call site (the instrumented instruction's address) and
 * the thread that made it.  When a block ends, the accesses of each warp are grouped into
 * requests: lane l's k-th access from site s joins the other lanes' k-th accesses from s, as
 * the 32 lanes of one warp-level instruction.  Where lanes run a site a different number of
 * times (an inner loop whose trip count differs by lane), the count restarts after each access
 * from a site all lanes run equally often, so the lanes pair again after such a loop; lanes
 * that skip some iterations (a predicated access) still pair in order: an approximation that
 * overstates sectors and conflicts there.  Per request:
 *   global memory: the distinct 32-byte sectors the lanes touch, and the ideal count, the bytes
 *     the lanes touch (each byte once) / 32 rounded up;
 *   shared memory (dynamic, or a static __shared__ array: cuda_sim.h puts those in the section
 *     mgt_sim_shared): the wavefronts, the most distinct 4-byte words any one of the 32 banks
 *     (word % 32) holds, and the ideal, the distinct words / 32 rounded up; the difference is
 *     the bank conflicts' extra wavefronts (a word many lanes read is one broadcast).
 * Per launch also the distinct sectors read and written (the DRAM traffic of a perfect cache:
 * each sector once) and the FLOPs the simulator can count: mma.sync instructions (4096 a warp's
 * m16n8k16) and cuBLASLt matmuls (2 m n k).  Rows are summed by (op section, kernel, grid,
 * block, dynamic shared memory); the section is test_cuda_ops.c's (mgt_sim_prof_tag).
 * At exit the table goes to FILE, then the worst call sites (offsets in the binary, for
 * addr2line).  MGT_SIM_PROFILE_BOUNDS=FILE: lines "kernel<TAB>sectors/request<TAB>sectors/ideal
 * <TAB>extra wavefronts/shared access", each compared with the kernel's worst row; a kernel over
 * a bound, or a bounded kernel that never ran, is reported as "not ok" and the process exits 1.
 * MGT_SIM_PROFILE_NEW_BOUNDS=FILE writes such a file from the run (write_bounds). */
#include "cuda_sim.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <map>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

bool mgt_sim_prof_on;

namespace {

struct rec {
	const void *site;
	uintptr_t addr;
	uint32_t n;
	bool write, shared;
};

struct stats {
	double launches = 0, greq = 0, gsect = 0, gideal = 0, gbytes = 0;
	double sreq = 0, swave = 0, sideal = 0, rd = 0, wr = 0, flops = 0;
	void add(const stats &o)
	{
		launches += o.launches, greq += o.greq, gsect += o.gsect, gideal += o.gideal;
		gbytes += o.gbytes, sreq += o.sreq, swave += o.swave, sideal += o.sideal;
		rd += o.rd, wr += o.wr, flops += o.flops;
	}
	double spr() const { return greq ? gsect / greq : 0; }
	double xpa() const { return sreq ? (swave - sideal) / sreq : 0; }
};

struct prof_t {
	FILE *out = NULL;
	std::string path, bounds, new_bounds, tag = "-";
	std::string key;                          /* the current launch's row */
	std::string kernel;
	std::vector<rec> thr[1024];
	std::unordered_set<uint64_t> rd, wr;     /* this launch's sectors */
	stats cur;
	std::map<std::string, stats> rows;        /* "section\tkernel\tgrid\tblock\tsmem" */
	std::map<std::string, stats> kernels;
	std::map<std::pair<std::string, const void *>, stats> sites;
	bool active = false;
};

prof_t &P()
{
	static prof_t *p = new prof_t; /* never destroyed: written at exit */
	return *p;
}

unsigned thread_linear(void)
{
	return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}

/* Sectors and ideal sectors of one global request; bytes is each lane's bytes summed. */
void global_req(std::vector<rec *> &v, stats &s)
{
	std::sort(v.begin(), v.end(), [](const rec *a, const rec *b) { return a->addr < b->addr; });
	uint64_t last_sect = UINT64_MAX;
	uintptr_t end = 0;
	double uniq = 0, sect = 0, bytes = 0;
	for (const rec *r : v) {
		bytes += r->n;
		const uintptr_t lo = std::max(r->addr, end), hi = r->addr + r->n;
		if (hi > lo)
			uniq += (double)(hi - lo), end = hi;
		for (uint64_t q = r->addr / 32; q <= (r->addr + r->n - 1) / 32; q++)
			if (last_sect == UINT64_MAX || q > last_sect)
				sect++, last_sect = q;
	}
	s.greq++, s.gsect += sect, s.gideal += ceil(uniq / 32), s.gbytes += bytes;
}

/* Wavefronts and ideal wavefronts of one shared-memory request. */
void shared_req(const std::vector<rec *> &v, stats &s)
{
	std::vector<uint64_t> w;
	for (const rec *r : v)
		for (uint64_t q = r->addr / 4; q <= (r->addr + r->n - 1) / 4; q++)
			w.push_back(q);
	std::sort(w.begin(), w.end());
	w.erase(std::unique(w.begin(), w.end()), w.end());
	unsigned bank[32] = {0}, worst = 0;
	for (uint64_t q : w)
		worst = std::max(worst, ++bank[q % 32]);
	s.sreq++, s.swave += worst, s.sideal += ceil((double)w.size() / 32);
}

struct req_key {
	const void *site;
	uint32_t epoch, k;
	bool operator==(const req_key &o) const { return site == o.site && epoch == o.epoch && k == o.k; }
};
struct req_hash {
	size_t operator()(const req_key &r) const
	{
		return std::hash<const void *>()(r.site) * 31 + r.k * 7919u + r.epoch;
	}
};

/* The sites every lane of [lo, hi) runs the same number of times (uniform: the warp's lanes all
 * reach them, as they do the statements around a loop whose trip count differs by lane). */
std::unordered_set<const void *> uniform_sites(prof_t &p, unsigned lo, unsigned hi)
{
	std::unordered_map<const void *, uint32_t> first, cnt;
	std::unordered_set<const void *> uni;
	for (const rec &r : p.thr[lo])
		first[r.site]++;
	for (auto &kv : first)
		uni.insert(kv.first);
	for (unsigned t = lo + 1; t < hi && !uni.empty(); t++) {
		cnt.clear();
		for (const rec &r : p.thr[t])
			cnt[r.site]++;
		for (auto it = uni.begin(); it != uni.end();)
			it = cnt[*it] == first[*it] ? std::next(it) : uni.erase(it);
		for (auto &kv : cnt)
			if (!first.count(kv.first))
				uni.erase(kv.first);
	}
	return uni;
}

/* The requests of the warp of lanes [lo, hi).  A uniform site's k-th execution pairs across the
 * lanes; another site's pairs by (the lane's count of uniform accesses before it, the k-th since
 * then), so lanes that ran an inner loop a different number of times pair again after it. */
void warp_requests(prof_t &p, unsigned lo, unsigned hi)
{
	const std::unordered_set<const void *> uni = uniform_sites(p, lo, hi);
	std::unordered_map<req_key, std::vector<rec *>, req_hash> req;
	std::unordered_map<const void *, std::pair<uint32_t, uint32_t>> nth; /* epoch, k */
	for (unsigned t = lo; t < hi; t++) {
		nth.clear();
		uint32_t epoch = 0;
		for (rec &r : p.thr[t]) {
			std::pair<uint32_t, uint32_t> &n = nth[r.site];
			const bool u = uni.count(r.site) != 0;
			if (!u && n.first != epoch)
				n = {epoch, 0};
			req[req_key{r.site, u ? 0 : epoch, n.second++}].push_back(&r);
			epoch += u;
		}
	}
	for (auto &kv : req) {
		stats s;
		if (kv.second[0]->shared)
			shared_req(kv.second, s);
		else
			global_req(kv.second, s);
		p.cur.add(s);
		p.sites[{p.kernel, kv.first.site}].add(s);
	}
}

void write_table(prof_t &p);
int check_bounds(prof_t &p, const char *pre);

void write_bounds(prof_t &p);

void at_exit(void)
{
	prof_t &p = P();
	write_table(p);
	if (!p.new_bounds.empty())
		write_bounds(p);
	if (!p.bounds.empty() && check_bounds(p, "not ok - "))
		_Exit(1);
}

std::string shape(dim3 g, dim3 b, size_t smem)
{
	char buf[128];
	snprintf(buf, sizeof buf, "%u,%u,%u\t%u,%u,%u\t%zu", g.x, g.y, g.z, b.x, b.y, b.z, smem);
	return buf;
}

} // namespace

/* ---- hooks (sim_mem.cc, cuda_sim.cc, sim_runtime.cc, mma_sim.h, test_cuda_ops.c) ---- */

void mgt_sim_prof_init(void)
{
	const char *f = getenv("MGT_SIM_PROFILE"), *b = getenv("MGT_SIM_PROFILE_BOUNDS");
	const char *nb = getenv("MGT_SIM_PROFILE_NEW_BOUNDS");
	if (!f || !*f)
		return;
	prof_t &p = P();
	p.path = f;
	p.bounds = b ? b : "";
	p.new_bounds = nb ? nb : "";
	mgt_sim_prof_on = true;
	atexit(at_exit);
}

void mgt_sim_prof_enable(void)
{
	mgt_sim_prof_on = true;
}

extern "C" void mgt_sim_prof_tag(const char *section)
{
	P().tag = section && *section ? section : "-";
}

void mgt_sim_prof_access(uintptr_t addr, size_t n, bool write, bool shared, const void *site)
{
	prof_t &p = P();
	if (!p.active || !n)
		return;
	const unsigned t = thread_linear() % 1024;
	p.thr[t].push_back(rec{site, addr, (uint32_t)n, write, shared});
	if (shared)
		return;
	std::unordered_set<uint64_t> &u = write ? p.wr : p.rd;
	for (uint64_t q = addr / 32; q <= (addr + n - 1) / 32; q++)
		u.insert(q);
}

void mgt_sim_prof_launch(const char *name, dim3 g, dim3 b, size_t smem)
{
	prof_t &p = P();
	p.kernel = name;
	p.key = p.tag + "\t" + name + "\t" + shape(g, b, smem);
	p.cur = stats();
	p.cur.launches = 1;
	p.rd.clear(), p.wr.clear();
	p.active = true;
}

void mgt_sim_prof_block_end(void)
{
	prof_t &p = P();
	const unsigned nt = blockDim.x * blockDim.y * blockDim.z;
	for (unsigned w = 0; w * 32 < nt; w++)
		warp_requests(p, 32 * w, std::min(nt, 32 * w + 32));
	for (unsigned t = 0; t < nt && t < 1024; t++)
		p.thr[t].clear();
}

void mgt_sim_prof_flops(double f)
{
	P().cur.flops += f;
}

void mgt_sim_prof_launch_end(void)
{
	prof_t &p = P();
	p.cur.rd = 32.0 * (double)p.rd.size(), p.cur.wr = 32.0 * (double)p.wr.size();
	p.rows[p.key].add(p.cur);
	p.kernels[p.kernel].add(p.cur);
	p.active = false;
}

void mgt_sim_prof_matmul(uint64_t m, uint64_t n, uint64_t k, double rd, double wr)
{
	prof_t &p = P();
	char name[128];
	snprintf(name, sizeof name, "cublasLtMatmul m%llu n%llu k%llu", (unsigned long long)m,
		 (unsigned long long)n, (unsigned long long)k);
	stats s;
	s.launches = 1, s.rd = rd, s.wr = wr, s.flops = 2.0 * (double)m * (double)n * (double)k;
	p.rows[p.tag + "\t" + name + "\t-\t-\t0"].add(s);
	p.kernels["cublasLtMatmul"].add(s);
}

namespace {

void write_row(FILE *f, const std::string &key, const stats &s)
{
	fprintf(f, "%s\t%.0f\t%.0f\t%.0f\t%.0f\t%.2f\t%.2f\t%.0f\t%.0f\t%.0f\t%.3f\t%.0f\t%.0f\t%.0f\n", key.c_str(),
		s.launches, s.greq, s.gsect, s.gideal, s.spr(), s.gideal ? s.gsect / s.gideal : 0, s.gbytes, s.sreq,
		s.swave - s.sideal, s.xpa(), s.rd, s.wr, s.flops);
}

/* The sites with the most excess sectors or wavefronts, with their offset in the binary. */
void write_sites(FILE *f, prof_t &p)
{
	std::vector<std::pair<double, std::pair<std::string, const void *>>> v;
	for (auto &kv : p.sites)
		v.push_back({(kv.second.gsect - kv.second.gideal) + 4 * (kv.second.swave - kv.second.sideal), kv.first});
	std::sort(v.begin(), v.end(), [](const auto &a, const auto &b) { return a.first > b.first; });
	fprintf(f, "\n# the 40 call sites with the most excess sectors + 4 x extra wavefronts "
		   "(addr2line -e BINARY OFFSET; kernels built with -g)\n"
		   "# kernel\toffset\trequests\tsectors\tideal\tsect/req\tshared\textra\textra/acc\n");
	for (size_t i = 0; i < v.size() && i < 40; i++) {
		const stats &s = p.sites[v[i].second];
		Dl_info di;
		uintptr_t off = (uintptr_t)v[i].second.second;
		if (dladdr(v[i].second.second, &di) && di.dli_fbase)
			off -= (uintptr_t)di.dli_fbase;
		fprintf(f, "# %s\t%#lx\t%.0f\t%.0f\t%.0f\t%.2f\t%.0f\t%.0f\t%.3f\n", v[i].second.first.c_str(),
			(unsigned long)(off - 1), s.greq, s.gsect, s.gideal, s.spr(), s.sreq, s.swave - s.sideal,
			s.xpa());
	}
}

void write_table(prof_t &p)
{
	FILE *f = fopen(p.path.c_str(), "w");
	if (!f) {
		perror(p.path.c_str());
		return;
	}
	fprintf(f, "# cuda sim access profile (tests/sim/sim_prof.cc): per op section, kernel and launch shape\n"
		   "# section\tkernel\tgrid\tblock\tsmem\tlaunches\tg.requests\tg.sectors\tg.ideal\tsect/req\t"
		   "sect/ideal\tg.lane_bytes\ts.accesses\ts.extra_wavefronts\textra/acc\tuniq_rd_B\tuniq_wr_B\tflops\n");
	for (auto &kv : p.rows)
		write_row(f, kv.first, kv.second);
	fprintf(f, "\n# per kernel, all shapes\n");
	for (auto &kv : p.kernels)
		write_row(f, "*\t" + kv.first + "\t*\t*\t*", kv.second);
	write_sites(f, p);
	fclose(f);
}

/* The worst rows of kernel k: the largest sectors/request, sectors/ideal and extra wavefronts/access. */
struct worst_t {
	double spr = 0, spi = 0, xpa = 0;
	bool seen = false;
};
worst_t worst(const prof_t &p, const std::string &k)
{
	worst_t w;
	for (auto &kv : p.rows) {
		const size_t a = kv.first.find('\t'), b = kv.first.find('\t', a + 1);
		if (kv.first.compare(a + 1, b - a - 1, k) != 0)
			continue;
		const stats &s = kv.second;
		w.seen = true;
		w.spr = std::max(w.spr, s.spr()), w.xpa = std::max(w.xpa, s.xpa());
		w.spi = std::max(w.spi, s.gideal ? s.gsect / s.gideal : 0);
	}
	return w;
}

/* MGT_SIM_PROFILE_NEW_BOUNDS: every kernel that made a global or shared access, its worst rows
 * plus 10% (and 0.05 extra wavefronts) for the inputs that decide some access patterns (token ids,
 * routing), rounded up to 0.01. */
void write_bounds(prof_t &p)
{
	FILE *f = fopen(p.new_bounds.c_str(), "w");
	if (!f) {
		perror(p.new_bounds.c_str());
		return;
	}
	fprintf(f, "# tests/sim/access-bounds.txt: per kernel, the most sectors/request, sectors/ideal and extra\n"
		   "# wavefronts/shared access any of its launch shapes may show in make check-sim-access (written\n"
		   "# by MGT_SIM_PROFILE_NEW_BOUNDS: the worst rows of a run plus 10%%, and 0.05 wavefronts).\n"
		   "# kernel\tsectors/request\tsectors/ideal\textra/access\n");
	for (auto &kv : p.kernels) {
		if (!kv.second.greq && !kv.second.sreq)
			continue;
		const worst_t w = worst(p, kv.first);
		fprintf(f, "%s\t%.2f\t%.2f\t%.2f\n", kv.first.c_str(), ceil(w.spr * 110) / 100,
			ceil(w.spi * 110) / 100, ceil(w.xpa * 110 + 5) / 100);
	}
	fclose(f);
}

/* One line of the bounds file: kernel, sectors/request, sectors/ideal, extra wavefronts/access. */
bool over(const prof_t &p, const char *line, int *n, const char *pre)
{
	char k[512];
	double bs, bi, bx;
	if (line[0] == '#' || sscanf(line, "%511[^\t]\t%lf\t%lf\t%lf", k, &bs, &bi, &bx) != 4)
		return false;
	(*n)++;
	const worst_t w = worst(p, k);
	if (w.seen && w.spr <= bs && w.spi <= bi && w.xpa <= bx)
		return false;
	printf("%saccess bounds: kernel %s: %s%.2f sectors/request (bound %.2f), %.2f sectors/ideal "
	       "(bound %.2f), %.3f extra wavefronts/shared access (bound %.3f)\n", pre, k,
	       w.seen ? "" : "never launched; ", w.spr, bs, w.spi, bi, w.xpa, bx);
	return true;
}

/* pre: what a line over a bound starts with ("not ok - ", or "# " where failing is the test) */
int check_bounds(prof_t &p, const char *pre)
{
	FILE *f = fopen(p.bounds.c_str(), "r");
	if (!f) {
		perror(p.bounds.c_str());
		return 1;
	}
	char line[1024];
	int bad = 0, n = 0;
	while (fgets(line, sizeof line, f))
		bad += over(p, line, &n, pre);
	fclose(f);
	printf("%s%s - access bounds: %d kernels, %d over their bounds (%s)\n", *pre == '#' ? "# " : "",
	       bad ? "not ok" : "ok", n, bad,
	       p.bounds.c_str());
	fflush(stdout);
	return bad;
}

} // namespace

int mgt_sim_prof_check(const char *bounds)
{
	prof_t &p = P();
	p.bounds = bounds;
	return check_bounds(p, "# ");
}

bool mgt_sim_prof_kernel(const char *kernel, double *spr, double *spi, double *xpa)
{
	const worst_t w = worst(P(), kernel);
	*spr = w.spr, *spi = w.spi, *xpa = w.xpa;
	return w.seen;
}
