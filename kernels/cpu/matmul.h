/* matmul.h: weight matrices times batches of activation vectors. */
#ifndef PHASED_MATMUL_H
#define PHASED_MATMUL_H

#include <stddef.h>
#include <stdint.h>

struct threadpool;
struct qmat;

/*
 * Prepare a rows x cols weight matrix of a tensor type for multiplication.
 * data holds the rows in GGUF order (row r at data + r * row_bytes) and must
 * stay mapped for the life of the qmat.  The kernel variant is chosen here
 * (quant_isa()).  NULL and *cause on failure.
 */
struct qmat	*qmat_create(uint32_t type, int64_t rows, int64_t cols, const void *data,
		    char **cause);
void		 qmat_free(struct qmat *);
int64_t		 qmat_rows(const struct qmat *);
/* Bytes of the weights' repacked copy, 0 when the mapped rows are used. */
size_t		 qmat_packed_bytes(const struct qmat *);
/* Whether batches of 64 tokens and more use the AMX tiles (amx.h). */
int		 qmat_amx(const struct qmat *);
/*
 * Whether F16 weights take bf16 dot products as BF16 weights do, all being
 * bf16 values (under bf16-dot auto, where the CPU has them).
 */
int		 qmat_bf16_values(const struct qmat *);
/* Whether F16 (or, under AVX2, BF16) weights take 16-bit integer products. */
int		 qmat_i16(const struct qmat *);

/*
 * Y[t][r] = sum over c of W[r][c] * X[t][c] for t < n_tok.  X is n_tok x cols
 * (row stride cols), Y is n_tok x rows with row stride ldy >= rows.  Each
 * element of Y is computed the same way whatever n_tok and the thread count
 * are (batch invariance).  pool may be NULL (one thread).
 */
void	qmat_mul(struct threadpool *pool, const struct qmat *, const float *X, int n_tok,
	    float *Y, int64_t ldy);

/*
 * The same for n (1 to QMAT_MUL_MAX) matrices of as many columns that
 * multiply the same X, e.g. a layer's q, k and v: Ys[i] (row stride
 * ldys[i]) gets ms[i] times X, with the same bits as qmat_mul gives, in one
 * run of the pool.
 */
#define QMAT_MUL_MAX	4
void	qmat_mul_n(struct threadpool *pool, int n, const struct qmat *const *ms,
	    const float *X, int n_tok, float *const *Ys, const int64_t *ldys);

/*
 * Read the weights that products of the n matrices stream (the repacked
 * copy, or the mapped rows) once, with vector loads and no arithmetic, on
 * the pool's threads: a decode step's memory traffic alone, for measuring
 * how close the kernels come to it.  Returns the bytes read; *sum, when
 * sum is not NULL, gets their sum as mem_read_sum (memread.h) gives it for
 * each matrix's stream, which shows every byte read exactly once.
 */
uint64_t qmat_read_n(struct threadpool *pool, int n, const struct qmat *const *ms,
	    uint64_t *sum);

/* Row r decoded to f32 (cols values), e.g. an embedding. */
void	qmat_get_row(const struct qmat *, int64_t r, float *out);

#endif
