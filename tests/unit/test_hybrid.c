/* Unit tests for lib/model/hybrid.c: Megatron's hybrid layer allocation from ratios against the
 * patterns its code gives (the facts sheet's derived examples: (10, 0.2, 0) and the 56-layer
 * 8B pattern of Megatron's examples/mamba/train.sh from (56, 0.08, 0.5)), Python's round-half-
 * even counts, and --hybrid-layer-pattern's checks.
 * Prints "ok"/"not ok" per check and "N passed, M failed"; exits 1 on failure. */
#include <math.h>
#include <string.h>

#include "check.h"
#include "model/model.h"

static int64_t count(const char *p, char c)
{
	int64_t n = 0;
	for (; *p; p++) n += *p == c;
	return n;
}

static void t_ratios(void)
{
	char p[128];
	CHECK(!mgt_hybrid_pattern_from_ratios(10, 0.2, 0.0, p) && !strcmp(p, "MMM*MM*MMM"), "(10, 0.2, 0): %s", p);
	const char *nemotron8b = "M-M-M--M-M*-M-M-M-M--M*-M-M-M-M-M*--M-M-M-M-M*-M--M-M-M-";
	CHECK(!mgt_hybrid_pattern_from_ratios(56, 0.08, 0.5, p) && !strcmp(p, nemotron8b), "(56, 0.08, 0.5): %s", p);
	/* 10 x 0.25 = 2.5: Python's round gives 2 (ties to even), C's round() 3 */
	CHECK(!mgt_hybrid_pattern_from_ratios(10, 0.25, 0.0, p) && count(p, '*') == 2, "(10, 0.25, 0): 2 attention layers: %s", p);
	CHECK(!mgt_hybrid_pattern_from_ratios(14, 0.25, 0.0, p) && count(p, '*') == 4, "(14, 0.25, 0): 3.5 rounds to 4: %s", p);
	CHECK(!mgt_hybrid_pattern_from_ratios(8, 0.0, 0.0, p) && !strcmp(p, "MMMMMMMM"), "no ratios: all Mamba: %s", p);
	CHECK(!mgt_hybrid_pattern_from_ratios(24, 0.125, 0.25, p) && count(p, '*') == 3 && count(p, '-') == 6 &&
	      count(p, 'M') == 15 && strlen(p) == 24, "(24, 0.125, 0.25): 3 attention, 6 MLP, 15 Mamba: %s", p);
	CHECK(mgt_hybrid_pattern_from_ratios(8, 0.6, 0.6, p) == MGT_ERR_USAGE, "ratios summing past 1 refused: %s", mgt_err_msg());
	CHECK(mgt_hybrid_pattern_from_ratios(0, 0.1, 0.0, p) == MGT_ERR_USAGE, "no layers refused");
}

static void t_check(void)
{
	int64_t n = 0;
	int seg = 0;
	CHECK(!mgt_hybrid_pattern_check("M*-E", 1, &n, &seg) && n == 4 && seg == 1, "M*-E: 4 layers, 1 segment");
	CHECK(!mgt_hybrid_pattern_check("M*|M-|ME|M*", 2, &n, &seg) && n == 8 && seg == 4,
	      "4 segments over PP 2 (virtual stages): 8 layers");
	CHECK(mgt_hybrid_pattern_check("M*|M-|ME", 2, &n, &seg) == MGT_ERR_USAGE && strstr(mgt_err_msg(), "3 pipeline"),
	      "3 segments over PP 2 refused: %s", mgt_err_msg());
	CHECK(mgt_hybrid_pattern_check("M*G-", 1, &n, &seg) == MGT_ERR_USAGE && strstr(mgt_err_msg(), "character 3"),
	      "G refused naming the character: %s", mgt_err_msg());
	CHECK(mgt_hybrid_pattern_check("M*M*/MM/MM", 1, &n, &seg) == MGT_ERR_USAGE && strstr(mgt_err_msg(), "multi-token"),
	      "the MTP suffix refused: %s", mgt_err_msg());
	CHECK(mgt_hybrid_pattern_check("||", 1, &n, &seg) == MGT_ERR_USAGE, "no layer refused: %s", mgt_err_msg());
}

int main(void)
{
	t_ratios();
	t_check();
	printf("%d passed, %d failed\n", passed, failed);
	return failed != 0;
}
