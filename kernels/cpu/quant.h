/* quant.h: number formats, dequantization and dot products of weight rows. */
#ifndef PHASED_QUANT_H
#define PHASED_QUANT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Half-precision and brain-float conversions (round to nearest even). */
float		fp16_to_f32(uint16_t);
uint16_t	f32_to_fp16(float);
float		bf16_to_f32(uint16_t);
uint16_t	f32_to_bf16(float);

/* Decode n elements (a multiple of the block size) of a row to f32. */
void	dequantize_row(uint32_t type, const void *src, float *dst, int64_t n);

/* Dot product of a weight row and an f32 vector in double precision. */
double	dot_row_ref(uint32_t type, const void *row, const float *x, int64_t n);

/*
 * Instruction-set variants of the kernels.  quant_isa() is the variant in
 * use: the best the CPU has unless quant_force_isa() chose another (tests
 * use it to reach every variant).  quant_force_isa() returns -1 when the
 * CPU lacks the variant; QUANT_ISA_AUTO restores the automatic choice.
 */
enum quant_isa {
	QUANT_ISA_AUTO = -1,
	QUANT_ISA_SCALAR = 0,
	QUANT_ISA_AVX2 = 1,	/* AVX2, FMA, F16C */
	QUANT_ISA_AVX512 = 2,	/* AVX-512 F/BW/VL/DQ with VNNI */
	QUANT_ISA_COUNT = 3,
};
int		 quant_isa(void);
int		 quant_isa_supported(int isa);
int		 quant_force_isa(int isa);
const char	*quant_isa_name(int isa);
/* The variant named name (as quant_isa_name() writes it), or -1. */
int		 quant_isa_by_name(const char *name);

/*
 * Internal interface between the matrix multiplication and the per-ISA
 * kernels.
 *
 * Activations for the integer kernels are quantized once per call, per
 * token, in blocks of 32 values: q = round(x / d) in [-127, 127].  Every
 * weight type is handled as unsigned 8-bit codes u with a constant offset
 * (value = scale * (u - off)).  A kernel "lane" is what one 32-bit lane of
 * vpdpbusd sums: four codes, or eight in the Q4_0 layout (two vpdpbusd
 * into the same lane).  bias holds -off times the sum of a lane's codes, so
 * integer multiply-adds started from the bias give the exact sum of
 * (u - off) * q for the lane, and dl holds the block scale of each lane.
 * s holds d * sum(q) of each block in natural order (the mins of Q4_K,
 * Q4_1, Q5_1 and Q5_K).  Q2_K, with a min per 16 elements, has the offset
 * -1: its bias is the plain sum of a lane's codes, which the kernels scale
 * by the lane's min.
 *
 * The codes are stored in the order the kernel unpacks weights in:
 *   ACT_NATURAL: element order; lane l is elements 4l..4l+3.
 *   ACT_Q4_0X4:  per 128 elements (blocks k = 0..3), bytes 16k..16k+15 are
 *	elements 0-15 of block k, bytes 64+16k.. elements 16-31; lane l of the
 *	group is bytes 4l.. and 64+4l.. (16 lanes per 128 elements).
 *   ACT_Q4_KX:   per 256 elements, the 32-element chunks in the order
 *	0 2 1 3 4 6 5 7; lane l is stored bytes 4l..4l+3.
 * Rows are padded with zeros to a multiple of 256 (stride) so kernels may
 * read whole groups.
 */
enum act_layout {
	ACT_NATURAL = 0,
	ACT_Q4_0X4 = 1,
	ACT_Q4_KX = 2,
	ACT_BF16 = 3,	/* float types: activations rounded to bf16 (xb) */
	ACT_BLOCK = 4,	/* element order; bias[b] is -off * the sum of block b */
	ACT_BLOCK16 = 5, /* the same per 16 elements (bias[h], h = e / 16) */
	/*
	 * Float types: the f32 activations (xf) interleaved by groups of
	 * ACT_F32X_TOK tokens, so a tile's broadcasts read one stream: token t,
	 * column c is at (t / G) * G * C2 + (c / 2) * 2G + (t % G) * 2 + c % 2
	 * (G = ACT_F32X_TOK, or n_tok when smaller; C2 = cols rounded up to
	 * even).
	 */
	ACT_F32X = 6,
	/*
	 * Element order; bias[b] holds the code sums of block b's two halves
	 * as int16 (elements 0-15 in the low half), not times the offset:
	 * the per-16 sums that sub-block offsets and mins need, ready for
	 * one vpmaddwd against a row's pair of sub-block scales.
	 */
	ACT_PAIR16 = 7,
	/*
	 * F16 weights on 16-bit integer products (f16_i16_avx512.c): xb
	 * holds each token's int16 codes, d the scale of each block of 32.
	 */
	ACT_I16 = 8,
	/*
	 * Float types on bf16 dot products, repacked: the bf16 activations
	 * (xb) grouped as ACT_F32X is, a 32-bit word per column pair (column
	 * 2p in the low half): token t, pair p is word (t / G) * G * P +
	 * p * G + t % G (P = (cols + 1) / 2), so a tile's broadcasts read one
	 * stream.
	 */
	ACT_BF16X = 9,
};
#define ACT_F32X_TOK	12

struct qact {
	int64_t		 cols;
	int64_t		 stride;	/* cols rounded up to 256 */
	int		 n_tok;
	int		 layout;
	const float	*x;	/* the f32 activations, n_tok x cols */
	int8_t		*q;	/* n_tok x stride codes */
	float		*d;	/* n_tok x stride/32 block scales */
	float		*dl;	/* n_tok x stride/4: scale of each lane */
	int32_t		*bias;	/* n_tok x stride/4 */
	float		*s;	/* n_tok x stride/32: d * sum(q) */
	uint16_t	*xb;	/* ACT_BF16: n_tok x stride bf16 values (ACT_BF16X) */
	float		*xf;	/* ACT_F32X: the interleaved f32 activations */
};

/* The IQ4_NL and IQ4_XS code book (a 4-bit code indexes it). */
extern const int8_t quant_iq4nl_values[16];

/* Code offset of an integer weight type (0 for the float types). */
int	quant_code_offset(uint32_t type);
/* Bytes of scratch the prepared activations need. */
size_t	quant_act_bytes(uint32_t type, int layout, int64_t cols, int n_tok);
/* Lay the activation arrays of x out over buf. */
void	quant_act_init(struct qact *a, uint32_t type, int layout, const float *x,
	    int64_t cols, int n_tok, void *buf);
/* Where element e of a row is stored in a layout. */
int64_t	quant_act_pos(int layout, int64_t e);
/* ACT_BLOCK(16): fold a token's lane biases into n biases of `lanes` each. */
void	quant_act_block_bias(int32_t *bias, int64_t n, int lanes);
/* ACT_PAIR16: a token's nb pairs of half-block code sums from its codes q. */
void	quant_act_pair16(const int8_t *q, int32_t *bias, int64_t nb);
/*
 * A repacked Q4_K super-block of pg rows (quant_pack_q4_k): d[pg] and
 * dmin[pg] (halves), the scales and mins [8][pg] (bytes), then the codes;
 * and its size in bytes.
 */
#define QUANT_Q4K_DM(pg)		(2 * (pg))
#define QUANT_Q4K_SC(pg)		(4 * (pg))
#define QUANT_Q4K_MN(pg)		(12 * (pg))
#define QUANT_Q4K_Q(pg)			(20 * (pg))
#define QUANT_Q4K_PACKED_BLOCK(pg)	(148 * (pg))
/* Copy Q4_K rows into the repacked kernels' layout, pg rows a group. */
size_t	quant_pack_q4_k(const uint8_t *w, size_t rb, int64_t rows, int64_t cols,
	    int pg, uint8_t *dst);
/* Quantize tokens [t0, t1). */
void	quant_act_fill(struct qact *a, uint32_t type, int t0, int t1);

/*
 * A kernel computes Y[t][r] for rows [r0, r0 + mr) and tokens [t0, t0 + nr)
 * with mr <= MR and nr <= NR of its variant.  Each output element is
 * computed by the same sequence of operations whatever mr, nr, r0 and t0
 * are, so results do not depend on the batch size or the thread split.
 */
typedef void (*quant_kernel_fn)(const uint8_t *w, size_t row_bytes, int64_t cols,
    int64_t r0, int mr, const struct qact *a, int t0, int nr, float *y, int64_t ldy);
typedef void (*quant_fill_fn)(struct qact *a, uint32_t type, int t0, int t1);
typedef size_t (*quant_pack_fn)(const uint8_t *w, size_t row_bytes, int64_t rows,
    int64_t cols, uint8_t *dst);
typedef void (*quant_packed_fn)(const uint8_t *pw, int64_t cols, int64_t r0, int mr,
    const struct qact *a, int t0, int nr, float *y, int64_t ldy);
struct quant_kernel {
	quant_kernel_fn	 fn;
	int		 mr, nr;
	int		 dmr;		/* rows to hand fn at once for one token (0: 1) */
	int		 layout;	/* enum act_layout the kernel reads */
	quant_fill_fn	 fill;		/* faster quant_act_fill, same results */
	/* Optional: the same product on weights repacked at load (below). */
	quant_pack_fn	 pack;
	quant_packed_fn	 pfn;
	int		 pmr;		/* rows per packed tile (a multiple of 16) */
	int		 smr;		/* the same for a small batch; 0: 16 */
	int		 pnr;
	int		 playout;	/* enum act_layout pfn reads */
	quant_fill_fn	 pfill;
	int64_t		 pmax_cols;	/* repacked only up to this width (0: any) */
	/*
	 * Optional, set by quant_amx_attach() (amx.h): pfn on the AMX tile
	 * unit for nr a multiple of anr tokens, with bit-identical results.
	 */
	quant_packed_fn	 afn;
	int		 anr;
};

/*
 * Repacking weights at load.  pack(w, row_bytes, rows, cols, dst) copies
 * the rows into the kernel's interleaved layout at dst and returns its
 * size; dst NULL only returns the size.  pfn computes Y[t][r] for rows
 * [r0, r0 + mr) (r0 a multiple of 16, mr <= pmr, or
 * smr for a batch of one or two tokens) and tokens [t0, t0 + nr)
 * from the packed copy pw, with the same guarantee as fn: each output is
 * computed the same way whatever the tile.  quant_allow_pack(0) keeps the
 * weights in the mapped file (no copy); it is read by qmat_create() and
 * returns the previous setting.
 */
int	quant_allow_pack(int allow);
int	quant_pack_allowed(void);

/*
 * Let weights use bf16 dot products (vdpbf16ps) where the CPU has them:
 * about twice the arithmetic rate, at the price of rounding the
 * activations, and F16 weights, to bf16 (8-bit significand).  which is
 * one of QUANT_BF16_DOT_*; NONE (exact) by default; read by qmat_create().
 * Returns the previous setting.
 */
#define QUANT_BF16_DOT_NONE	0
#define QUANT_BF16_DOT_ALL	1	/* F16 and BF16 weights */
#define QUANT_BF16_DOT_BF16	2	/* BF16 weights, F16 ones of bf16 values */
int	quant_allow_bf16_dot(int which);
int	quant_bf16_dot_allowed(void);
/*
 * Whether bf16 dot products are there: the variant in use (quant_isa(),
 * forced or not) is AVX-512 and the CPU has the instructions.
 */
int	quant_bf16_dot_supported(void);
/*
 * Whether matrices of type (F16 or BF16) take bf16 dot products by the
 * setting and the CPU: F16 ones under ALL, BF16 ones under ALL or BF16
 * (F16 ones of bf16 values under BF16 are qmat_create()'s to find).
 */
int	quant_bf16_dot_takes(uint32_t type);
/*
 * The setting worth taking by default: BF16 weights (which lose nothing
 * more than their activations' rounding) where the CPU issues vdpbf16ps at
 * 3/4 or more of its f32 multiply-add rate, else none.  *rate (may be
 * NULL) gets that measured ratio, 0 without the instructions.
 */
int	quant_bf16_dot_auto(double *rate);
/* vdpbf16ps's issue rate over vfmadd231ps's (float_avx512.c). */
double	float_avx512_bf16_rate(void);
/* Whether n F16 values are all bf16 values too (float_avx512.c). */
int	float_avx512_f16_is_bf16(const void *w, size_t n);

/*
 * Let F16 weights take 16-bit integer dot products (vpdpwssd, see
 * f16_i16_avx512.c; vpmaddwd on AVX2, f16_i16_avx2.c, with the same
 * bits): weights kept to 13 bits of their block's largest,
 * activations to 13 bits of theirs.  Off (exact) by default; read by
 * qmat_create() for F16 matrices that do not take bf16 dot products,
 * and for BF16 ones under the AVX2 variant.  Returns the previous setting.
 */
int	quant_allow_f16_i16(int allow);
int	quant_f16_i16_allowed(void);
/*
 * Whether that is worth it on this CPU under the variant in use: where
 * it issues vpdpwssd (AVX2: vpmaddwd with its vpaddd) at
 * QUANT_I16_MIN_RATE or more of its f32 multiply-add rate.  *rate (may be
 * NULL) gets the measured ratio, 0 under the scalar variant.
 */
int	quant_f16_i16_auto(double *rate);
/*
 * Each of those issues does twice the products of a multiply-add, so at
 * 0.6 the products come 1.2 times as fast before the tiles' loads.  The
 * margin is for the measure, which is short: on a 2-core Zen 3 whose
 * cores were shared it read 0.67 to 1.25 within minutes, while the tiles
 * ran 1.3 to 1.7 times as fast as exact ones throughout.
 */
#define QUANT_I16_MIN_RATE	0.6
/* vpdpwssd's issue rate over vfmadd231ps's (float_avx512.c). */
double	float_avx512_i16_rate(void);
/* vpmaddwd and vpaddd's issue rate over vfmadd231ps's (f16_i16_avx2.c). */
double	float_avx2_i16_rate(void);
/* Whether n F16 (bf16: BF16) values are all finite (f16_i16_avx2.c, AVX2). */
int	i16_finite(const void *w, size_t n, int bf16);
/* The 16-bit integer kernel of F16 or BF16 weights (f16_i16_avx512.c). */
struct quant_kernel	quant_kernel_avx512_i16(uint32_t type);
/* The same on AVX2 (f16_i16_avx2.c, the same bits). */
struct quant_kernel	quant_kernel_avx2_i16(uint32_t type);

/* The kernel of a variant for a type; fn is NULL when it has none. */
struct quant_kernel	quant_kernel_get(int isa, uint32_t type);
struct quant_kernel	quant_kernel_scalar(uint32_t type);
struct quant_kernel	quant_kernel_avx2(uint32_t type);
struct quant_kernel	quant_kernel_avx512(uint32_t type);
/* The bf16 dot-product kernel of F16 or BF16 weights, whatever the setting. */
struct quant_kernel	quant_kernel_avx512_bf16dot(uint32_t type);
/* Add the repacked F16/BF16 path (float_avx512.c); bf16: bf16 dot products. */
void	float_avx512_packed(struct quant_kernel *k, uint32_t type, int bf16);

/* Code (0..63) of element e (0..255) of a Q6_K super-block. */
static inline int
q6k_code(const uint8_t *b, int e)
{
	const uint8_t	*ql = b, *qh = b + 128;
	int		 h = e / 128, i = e % 128, l = i % 32, part = i / 32;
	int		 lo, hi;

	ql += 64 * h;
	qh += 32 * h;
	lo = (part & 1) ? ql[32 + l] : ql[l];
	lo = (part & 2) ? lo >> 4 : lo & 0xf;
	hi = (qh[l] >> (2 * part)) & 3;
	return (lo | (hi << 4));
}

/* Unpack the eight 6-bit scales and mins of a Q4_K super-block. */
static inline void
q4k_scales(const uint8_t *p, uint8_t *sc, uint8_t *mn)
{
	int	j;

	for (j = 0; j < 4; j++) {
		sc[j] = p[j] & 63;
		mn[j] = p[j + 4] & 63;
	}
	for (j = 4; j < 8; j++) {
		sc[j] = (p[j + 4] & 0xf) | ((p[j - 4] >> 6) << 4);
		mn[j] = (p[j + 4] >> 4) | ((p[j] >> 6) << 4);
	}
}

/* q4k_scales with the eight scales and mins packed into a word each. */
static inline void
q4k_scales_fast(const uint8_t *p, uint64_t *sc, uint64_t *mn)
{
	uint32_t	w0, w1, w2;

	memcpy(&w0, p, 4);
	memcpy(&w1, p + 4, 4);
	memcpy(&w2, p + 8, 4);
	*sc = (w0 & 0x3f3f3f3f) | (uint64_t)((w2 & 0x0f0f0f0f) |
	    ((w0 >> 2) & 0x30303030)) << 32;
	*mn = (w1 & 0x3f3f3f3f) | (uint64_t)(((w2 >> 4) & 0x0f0f0f0f) |
	    ((w1 >> 2) & 0x30303030)) << 32;
}

#endif
