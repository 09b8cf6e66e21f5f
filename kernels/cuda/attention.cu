/*
 * attention.cu: paged causal attention for a mixed batch (prefill chunks
 * and decode tokens together), FlashAttention style.
 *
 * A thread block takes up to ATT_BR query rows of one sequence that share
 * a kv head: with G = n_heads / n_kv_heads, row r of a sequence is token
 * r / G of its chunk and query head kv_head * G + r % G, so the G heads of
 * a group read each K/V tile once (grouped-query attention).  Keys and
 * values stream through shared memory ATT_KT tokens at a time, gathered
 * through the block table from F16 pages and widened to F32.  Each warp
 * owns ATT_BR / ATT_WARPS rows and keeps for each the running maximum m,
 * the running sum l and the unnormalized output o in registers (the
 * online softmax): a tile's scores come from lane j scoring key j against
 * the row's query, the tile maximum rescales l and o by exp(m - m_new),
 * and the probabilities are broadcast lane by lane into o += p_j * v_j
 * (each lane holds head_dim / 32 output dimensions).  The attention matrix
 * is never stored.  Tiles stop at the last position the block's rows may
 * see (causal).
 *
 * Decode has one row per head group and sequence, which leaves the device
 * mostly idle when there are few sequences with long contexts.  The
 * context is then split into slices of split_len tokens, one thread block
 * each, writing (m, l, o) per slice to workspace; attn_reduce_kernel
 * combines them: out = sum_s e^(m_s - M) o_s / sum_s e^(m_s - M) l_s.
 *
 * The arithmetic is plain F32 on CUDA cores; a tensor-core version (mma on
 * F16 tiles) is the next step for long prefills.
 */
#include "config.h"

#include <string.h>

#include "cuda_device.h"

#define ATT_BR		16			/* query rows per block */
#define ATT_WARPS	4
#define ATT_RPW		(ATT_BR / ATT_WARPS)	/* rows per warp */
#define ATT_KT		32			/* keys per tile (one per lane) */
#define ATT_SPLIT_MIN	256			/* shortest automatic slice */

struct att_params {
	float			*out;
	const float		*q;
	const __half		*kc;
	const __half		*vc;
	const int32_t		*bt;
	const struct attn_seq	*seqs;
	float			*ws_o;		/* [n_splits][n_tok][n_heads][hd] */
	float			*ws_ml;		/* [n_splits][n_tok][n_heads][2] */
	int			 n_tok;
	int			 max_blocks;
	int			 n_heads;
	int			 n_kv;
	int			 hd;
	int			 group;
	int			 split_len;
	int			 n_splits;
	float			 scale;
};

/* Attention for ATT_BR rows over one slice of the context. */
template <int DPL>
static __global__ void __launch_bounds__(ATT_WARPS * 32)
attn_kernel(struct att_params p)
{
	extern __shared__ float	 sm[];
	const int		 hd = p.hd, hdp = hd + 1, hd8 = hd / 8;
	float			*ks_ = sm;			/* [KT][hd+1] */
	float			*vs_ = ks_ + ATT_KT * hdp;	/* [KT][hd] */
	float			*qs_ = vs_ + ATT_KT * hd;	/* [BR][hd] */
	const int		 kvh = blockIdx.y % p.n_kv;
	const int		 split = blockIdx.y / p.n_kv;
	const int		 lane = threadIdx.x, warp = threadIdx.y;
	const int		 tid = warp * 32 + lane;
	const struct attn_seq	 sq = p.seqs[blockIdx.z];
	const int32_t		*bt = p.bt + (size_t)blockIdx.z * p.max_blocks;
	const int		 n_rows = sq.q_len * p.group;
	const int		 r0 = blockIdx.x * ATT_BR;
	const int		 base_pos = sq.ctx_len - sq.q_len;
	float			 m[ATT_RPW], l[ATT_RPW], o[ATT_RPW][DPL];
	int			 kbeg, kend, kt, i, rr, d;

	if (r0 >= n_rows)
		return;
	/* Keys this block may need: up to the last row's position. */
	kbeg = 0;
	kend = base_pos + (min(r0 + ATT_BR, n_rows) - 1) / p.group + 1;
	if (p.n_splits > 1) {
		kbeg = split * p.split_len;
		kend = min(kend, kbeg + p.split_len);
	}
	if (kbeg >= kend)
		return;

	/* The block's queries, pre-scaled; rows past the end are zeros. */
	for (i = tid; i < ATT_BR * hd; i += ATT_WARPS * 32) {
		int	r = r0 + i / hd;
		float	v = 0.0f;

		if (r < n_rows)
			v = p.q[((size_t)(sq.q_start + r / p.group) * p.n_heads +
			    kvh * p.group + r % p.group) * hd + i % hd] * p.scale;
		qs_[i] = v;
	}
#pragma unroll
	for (rr = 0; rr < ATT_RPW; rr++) {
		m[rr] = -INFINITY;
		l[rr] = 0.0f;
#pragma unroll
		for (d = 0; d < DPL; d++)
			o[rr][d] = 0.0f;
	}

	for (kt = kbeg; kt < kend; kt += ATT_KT) {
		__syncthreads();	/* the previous tile is consumed */
		for (i = tid; i < ATT_KT * hd8; i += ATT_WARPS * 32) {
			int	j = i / hd8, c = i % hd8, t = kt + j, e;
			uint4	ku = make_uint4(0, 0, 0, 0), vu = ku;

			if (t < kend) {
				size_t off = (((size_t)bt[t / KV_BLOCK] *
				    KV_BLOCK + t % KV_BLOCK) * p.n_kv + kvh) *
				    hd + 8 * c;
				ku = *(const uint4 *)(p.kc + off);
				vu = *(const uint4 *)(p.vc + off);
			}
			for (e = 0; e < 4; e++) {
				h2_to_f(u4_word(ku, e), ks_ + j * hdp + 8 * c + 2 * e);
				h2_to_f(u4_word(vu, e), vs_ + j * hd + 8 * c + 2 * e);
			}
		}
		__syncthreads();

#pragma unroll
		for (rr = 0; rr < ATT_RPW; rr++) {
			int	rl = warp + rr * ATT_WARPS, r = r0 + rl;
			int	pos, t = kt + lane, jn, jj;
			float	s = -INFINITY, tmax, mn, corr, pr;

			if (r >= n_rows)
				continue;	/* warp-uniform */
			pos = base_pos + r / p.group;
			if (t < kend && t <= pos) {
				const float *qr = qs_ + rl * hd;
				const float *kr = ks_ + lane * hdp;

				s = 0.0f;
				for (d = 0; d < hd; d++)
					s += qr[d] * kr[d];
			}
			tmax = warp_max(s);
			if (tmax == -INFINITY)
				continue;	/* nothing visible in this tile */
			mn = fmaxf(m[rr], tmax);
			corr = expf(m[rr] - mn);	/* 0 on the first tile */
			pr = s == -INFINITY ? 0.0f : expf(s - mn);
			l[rr] = l[rr] * corr + warp_sum(pr);
#pragma unroll
			for (d = 0; d < DPL; d++)
				o[rr][d] *= corr;
			jn = min(ATT_KT, kend - kt);
			for (jj = 0; jj < jn; jj++) {
				float pj = __shfl_sync(FULL_MASK, pr, jj);
#pragma unroll
				for (d = 0; d < DPL; d++)
					if (lane + 32 * d < hd)
						o[rr][d] += pj *
						    vs_[jj * hd + lane + 32 * d];
			}
			m[rr] = mn;
		}
	}

#pragma unroll
	for (rr = 0; rr < ATT_RPW; rr++) {
		int	rl = warp + rr * ATT_WARPS, r = r0 + rl;
		size_t	row, pi;
		float	inv;

		if (r >= n_rows)
			continue;
		row = (size_t)(sq.q_start + r / p.group) * p.n_heads +
		    kvh * p.group + r % p.group;
		if (p.n_splits > 1) {
			pi = (size_t)split * p.n_tok * p.n_heads + row;
#pragma unroll
			for (d = 0; d < DPL; d++)
				if (lane + 32 * d < hd)
					p.ws_o[pi * hd + lane + 32 * d] = o[rr][d];
			if (lane == 0) {
				p.ws_ml[2 * pi] = m[rr];
				p.ws_ml[2 * pi + 1] = l[rr];
			}
		} else {
			inv = l[rr] > 0.0f ? 1.0f / l[rr] : 0.0f;
#pragma unroll
			for (d = 0; d < DPL; d++)
				if (lane + 32 * d < hd)
					p.out[row * hd + lane + 32 * d] =
					    o[rr][d] * inv;
		}
	}
}

/* Combine the slices of one (token, head) row; one thread per dimension. */
static __global__ void
attn_reduce_kernel(struct att_params p)
{
	const struct attn_seq	sq = p.seqs[blockIdx.z];
	int			i = blockIdx.x, h = blockIdx.y, d = threadIdx.x;
	int			pos, ns, sp;
	size_t			row, pi, stride;
	float			mx = -INFINITY, sum = 0.0f, acc = 0.0f, mm, w;

	if (i >= sq.q_len || d >= p.hd)
		return;
	pos = sq.ctx_len - sq.q_len + i;
	ns = pos / p.split_len + 1;	/* slices holding a visible key */
	row = (size_t)(sq.q_start + i) * p.n_heads + h;
	stride = (size_t)p.n_tok * p.n_heads;
	for (sp = 0; sp < ns; sp++)
		mx = fmaxf(mx, p.ws_ml[2 * (sp * stride + row)]);
	for (sp = 0; sp < ns; sp++) {
		pi = sp * stride + row;
		if ((mm = p.ws_ml[2 * pi]) == -INFINITY)
			continue;
		w = expf(mm - mx);
		sum += w * p.ws_ml[2 * pi + 1];
		acc += w * p.ws_o[pi * p.hd + d];
	}
	p.out[row * p.hd + d] = sum > 0.0f ? acc / sum : 0.0f;
}

/* Workspace bytes for splitting n_tok rows into n_splits slices. */
extern "C" size_t
cuda_attention_workspace_size(int n_tok, int n_heads, int head_dim,
    int n_splits)
{
	return (size_t)n_splits * n_tok * n_heads * (head_dim + 2) *
	    sizeof(float);
}

/* Launch the attention kernel for DPL dimensions per lane. */
template <int DPL>
static int
attn_launch(const struct att_params *p, dim3 grid, cuda_stream_t stream)
{
	size_t		smem = ((size_t)ATT_KT * (p->hd + 1) +
			    (size_t)ATT_KT * p->hd + (size_t)ATT_BR * p->hd) *
			    sizeof(float);
	cudaError_t	e;

	if (smem > 48 * 1024 && (e = cudaFuncSetAttribute(attn_kernel<DPL>,
	    cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem)) !=
	    cudaSuccess)
		return (int)e;
	attn_kernel<DPL><<<grid, dim3(32, ATT_WARPS), smem, stream>>>(*p);
	return launch_result();
}

/* Choose the number of context slices: 1 unless the grid is too small. */
static int
attn_splits(const struct cuda_attention_args *a, long base_blocks,
    int *split_len)
{
	int	dev, sms = 132, want, ns;

	if (a->split_len < 0)
		return 1;
	if (a->split_len > 0) {
		*split_len = a->split_len;
		return (a->max_ctx_len + a->split_len - 1) / a->split_len;
	}
	if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms,
	    cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
		cudaGetLastError();
		sms = 132;
	}
	if (base_blocks >= 2L * sms || a->max_ctx_len < 2 * ATT_SPLIT_MIN)
		return 1;
	want = (int)((2L * sms + base_blocks - 1) / base_blocks);
	ns = a->max_ctx_len / ATT_SPLIT_MIN;
	if (ns > want)
		ns = want;
	if (ns <= 1)
		return 1;
	*split_len = ((a->max_ctx_len + ns - 1) / ns + ATT_KT - 1) /
	    ATT_KT * ATT_KT;
	ns = (a->max_ctx_len + *split_len - 1) / *split_len;
	if (ns <= 1 || a->workspace == NULL || a->workspace_bytes <
	    cuda_attention_workspace_size(a->n_tok, a->n_heads, a->head_dim, ns))
		return 1;
	return ns;
}

/* Paged causal attention for a batch of sequences. */
extern "C" int
cuda_attention_forward(const struct cuda_attention_args *a,
    cuda_stream_t stream)
{
	struct att_params	p;
	long			tiles, base;
	int			e, hd = a->head_dim;

	if (a->n_seqs < 0 || a->n_seqs > 65535 || a->n_tok < 0 ||
	    a->n_heads <= 0 || a->n_kv_heads <= 0 ||
	    a->n_heads % a->n_kv_heads != 0 || hd <= 0 || hd % 8 != 0 ||
	    hd > ATTN_MAX_HEAD_DIM || a->max_q_len < 0 || a->max_ctx_len < 0 ||
	    a->max_blocks < 0 || (a->split_len > 0 && a->split_len % ATT_KT) ||
	    !is_aligned(a->k_cache, 16) || !is_aligned(a->v_cache, 16))
		return (int)cudaErrorInvalidValue;
	if (a->n_seqs == 0 || a->n_tok == 0 || a->max_q_len == 0)
		return 0;

	memset(&p, 0, sizeof p);
	p.out = a->out;
	p.q = a->q;
	p.kc = (const __half *)a->k_cache;
	p.vc = (const __half *)a->v_cache;
	p.bt = a->block_tables;
	p.seqs = a->seqs;
	p.n_tok = a->n_tok;
	p.max_blocks = a->max_blocks;
	p.n_heads = a->n_heads;
	p.n_kv = a->n_kv_heads;
	p.hd = hd;
	p.group = a->n_heads / a->n_kv_heads;
	p.scale = a->scale;
	tiles = ((long)a->max_q_len * p.group + ATT_BR - 1) / ATT_BR;
	base = tiles * a->n_kv_heads * a->n_seqs;
	p.split_len = 0;
	p.n_splits = attn_splits(a, base, &p.split_len);
	if (p.n_splits > 1) {
		if (a->workspace == NULL || a->workspace_bytes <
		    cuda_attention_workspace_size(a->n_tok, a->n_heads, hd,
		    p.n_splits) || (long)p.n_splits * a->n_kv_heads > 65535)
			return (int)cudaErrorInvalidValue;
		p.ws_o = (float *)a->workspace;
		p.ws_ml = p.ws_o + (size_t)p.n_splits * a->n_tok * a->n_heads * hd;
	}
	if (tiles > 0x7fffffffL)
		return (int)cudaErrorInvalidValue;

	dim3 grid((unsigned)tiles, (unsigned)(a->n_kv_heads * p.n_splits),
	    (unsigned)a->n_seqs);
	if (hd <= 32)
		e = attn_launch<1>(&p, grid, stream);
	else if (hd <= 64)
		e = attn_launch<2>(&p, grid, stream);
	else if (hd <= 128)
		e = attn_launch<4>(&p, grid, stream);
	else
		e = attn_launch<8>(&p, grid, stream);
	if (e != 0 || p.n_splits == 1)
		return e;
	attn_reduce_kernel<<<dim3((unsigned)a->max_q_len, (unsigned)a->n_heads,
	    (unsigned)a->n_seqs), (unsigned)((hd + 31) / 32 * 32), 0,
	    stream>>>(p);
	return launch_result();
}
