/*
 * test-amx: the AMX tile kernels give bit for bit what the AVX-512 packed
 * kernels give, for every type they cover, and the switch turns them off.
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amx.h"
#include "matmul.h"
#include "quant.h"
#include "tap.h"
#include "tensor_type.h"
#include "threadpool.h"
#include "util.h"
#include "kernel-testutil.h"

static const uint32_t types[] = {
	TT_Q4_0, TT_Q8_0, TT_Q4_1, TT_Q5_0, TT_Q5_1, TT_IQ4_NL
};
/* Rows: whole groups, a partial one, one tile of 32 plus a partial group. */
static const int64_t rowcounts[] = { 16, 37, 64, 100 };
/* Columns: one block, a partial pass of widened blocks, two passes and more. */
static const int64_t colcounts[] = { 32, 96, 1056, 2080 };
/*
 * Tokens: below the AMX threshold (64), tile pairs, pairs and a single
 * tile, a tail left to AVX-512 longer than a tile, a short one.
 */
static const int ntoks[] = { 20, 64, 80, 111, 130 };
#define MAXTOK	130

/* AMX against AVX-512 on one type and shape, with 1 and 2 threads. */
static void
test_shape(struct threadpool *pool, uint32_t type, int64_t rows, int64_t cols)
{
	const struct tensor_type_info *ti = tensor_type_get(type);
	size_t		 rb = tensor_row_bytes(ti, cols);
	uint8_t		*w = xmalloc(rows * rb);
	float		*x = xmalloc(MAXTOK * cols * sizeof *x);
	int64_t		 ldy = rows + 5, r;
	float		*ya = xmalloc(MAXTOK * ldy * sizeof *ya);
	float		*yv = xmalloc(MAXTOK * ldy * sizeof *yv);
	struct qmat	*ma, *mv;
	char		*cause = NULL;
	int		 i, t, nth, bad = 0, untouched = 1;
	size_t		 k;

	for (r = 0; r < rows; r++)
		ktu_fill_row(type, w + r * rb, cols);
	for (k = 0; k < (size_t)MAXTOK * cols; k++)
		x[k] = ktu_uniform() * (k % 7 == 0 ? 4.0f : 1.0f);
	quant_allow_amx(1);
	ma = qmat_create(type, rows, cols, w, &cause);
	quant_allow_amx(0);
	mv = qmat_create(type, rows, cols, w, &cause);
	quant_allow_amx(1);
	if (!ok(ma != NULL && mv != NULL, "%s %lldx%lld: qmat_create", ti->name,
	    (long long)rows, (long long)cols)) {
		diag("%s", cause);
		free(cause);
		goto out;
	}
	ok(qmat_amx(ma) && !qmat_amx(mv), "%s %lldx%lld: AMX attached only when allowed",
	    ti->name, (long long)rows, (long long)cols);
	for (nth = 1; nth <= 2; nth++)
		for (i = 0; i < (int)(sizeof ntoks / sizeof ntoks[0]); i++) {
			int n = ntoks[i];

			memset(ya, 0xff, MAXTOK * ldy * sizeof *ya);
			memset(yv, 0xee, MAXTOK * ldy * sizeof *yv);
			qmat_mul(nth == 1 ? NULL : pool, ma, x, n, ya, ldy);
			qmat_mul(nth == 1 ? NULL : pool, mv, x, n, yv, ldy);
			for (t = 0; t < n; t++) {
				if (memcmp(ya + t * ldy, yv + t * ldy, rows * sizeof *ya) != 0) {
					if (bad++ == 0)
						for (r = 0; r < rows; r++)
							if (memcmp(&ya[t * ldy + r], &yv[t * ldy + r],
							    sizeof *ya) != 0) {
								diag("n_tok %d t %d r %lld: amx %.9g "
								    "avx512 %.9g", n, t, (long long)r,
								    ya[t * ldy + r], yv[t * ldy + r]);
								break;
							}
				}
				/* The padding between rows of Y stays untouched. */
				for (r = rows; r < ldy; r++) {
					uint32_t bits;

					memcpy(&bits, &ya[t * ldy + r], 4);
					untouched &= bits == 0xffffffff;
				}
			}
		}
	ok(bad == 0, "%s %lldx%lld: AMX bit-identical to AVX-512", ti->name,
	    (long long)rows, (long long)cols);
	ok(untouched, "%s %lldx%lld: padding of Y untouched", ti->name,
	    (long long)rows, (long long)cols);
out:
	qmat_free(ma);
	qmat_free(mv);
	free(w);
	free(x);
	free(ya);
	free(yv);
}

int
main(void)
{
	struct threadpool	*pool;
	struct qmat		*m;
	char			*cause = NULL;
	uint8_t			 wbuf[16 * 64 * 2];	/* Q8_0 or F16, 16 x 64 */
	size_t			 i, j, k;

	if (quant_force_isa(QUANT_ISA_AVX512) != 0)
		skip_all("the CPU has no AVX-512 variant, so no AMX kernels");
	if (!quant_amx_supported())
		skip_all("AMX tiles not usable here (CPU without AMX-INT8, tile state "
		    "not enabled by the OS, or tile permission refused)");
	if ((pool = threadpool_create(2, NULL, &cause)) == NULL)
		skip_all("no thread pool: %s", cause);

	/* The switch, and which weights get the tiles. */
	memset(wbuf, 0, sizeof wbuf);
	is_int(quant_allow_amx(0), 1, "AMX allowed by default");
	m = qmat_create(TT_Q8_0, 16, 64, wbuf, &cause);
	ok(m != NULL && !qmat_amx(m), "quant_allow_amx(0): no AMX");
	qmat_free(m);
	is_int(quant_allow_amx(1), 0, "quant_allow_amx returns the old setting");
	m = qmat_create(TT_Q8_0, 16, 64, wbuf, &cause);
	ok(m != NULL && qmat_amx(m), "Q8_0 repacked: AMX");
	qmat_free(m);
	m = qmat_create(TT_F16, 16, 64, wbuf, &cause);
	ok(m != NULL && !qmat_amx(m), "F16: no AMX kernel");
	qmat_free(m);
	quant_allow_pack(0);
	m = qmat_create(TT_Q4_0, 16, 64, wbuf, &cause);
	ok(m != NULL && !qmat_amx(m), "Q4_0 on the mapped rows: no AMX");
	qmat_free(m);
	quant_allow_pack(1);

	for (i = 0; i < sizeof types / sizeof types[0]; i++)
		for (j = 0; j < sizeof rowcounts / sizeof rowcounts[0]; j++)
			for (k = 0; k < sizeof colcounts / sizeof colcounts[0]; k++)
				test_shape(pool, types[i], rowcounts[j], colcounts[k]);
	quant_force_isa(QUANT_ISA_AUTO);
	threadpool_destroy(pool);
	done_testing();
}
