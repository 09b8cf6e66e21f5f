/* gguf.h: a validating reader for GGUF v2/v3 model files. */
#ifndef PHASED_GGUF_H
#define PHASED_GGUF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/*
 * A GGUF file comes from outside and is treated as hostile: gguf_open()
 * checks every count, length, dimension, type, offset and size against the
 * real file size before it uses or allocates from it.  These are the
 * limits it enforces.
 */
#define GGUF_MAX_DIMS		4
#define GGUF_MAX_DIM		(1ULL << 40)	/* largest single dimension */
#define GGUF_MAX_ALIGNMENT	(1U << 20)	/* largest general.alignment */
#define GGUF_DEFAULT_ALIGNMENT	32
#define GGUF_MAX_KEY_LEN	65535		/* bytes in a metadata key */
#define GGUF_MAX_NAME_LEN	255		/* bytes in a tensor name */
/* Caps on the counts, beyond the file size, to bound memory use. */
#define GGUF_MAX_KV		(1U << 20)
#define GGUF_MAX_TENSORS	(1U << 20)

enum gguf_vtype {
	GGUF_VT_UINT8 = 0,
	GGUF_VT_INT8,
	GGUF_VT_UINT16,
	GGUF_VT_INT16,
	GGUF_VT_UINT32,
	GGUF_VT_INT32,
	GGUF_VT_FLOAT32,
	GGUF_VT_BOOL,
	GGUF_VT_STRING,
	GGUF_VT_ARRAY,
	GGUF_VT_UINT64,
	GGUF_VT_INT64,
	GGUF_VT_FLOAT64,
};
#define GGUF_VT_COUNT	(GGUF_VT_FLOAT64 + 1)

/* A string inside the file: points into the mapping, not NUL-terminated. */
struct gguf_str {
	uint64_t	 len;
	const char	*ptr;
};

/*
 * One metadata key/value.  Unsigned integers are in v.u, signed in v.i,
 * FLOAT32/FLOAT64 in v.f, BOOL in v.b (0 or 1), STRING in v.s.  For arrays,
 * v.arr.data points at the raw little-endian elements inside the file and
 * is NOT aligned: read elements with memcpy or the gguf_arr_* helpers
 * below.  String arrays have v.arr.strs (n validated entries) instead.
 */
struct gguf_kv {
	char		*key;		/* NUL-terminated copy */
	enum gguf_vtype	 type;
	union {
		uint64_t	 u;
		int64_t		 i;
		double		 f;
		int		 b;
		struct gguf_str	 s;
		struct {
			enum gguf_vtype	 type;
			uint64_t	 n;
			const void	*data;	/* raw elements for scalars */
			struct gguf_str	*strs;	/* for string arrays */
		} arr;
	} v;
};

/* One tensor: shape (unused dimensions are 1), type and where its data is. */
struct gguf_tensor {
	char		*name;
	uint32_t	 n_dims;
	uint64_t	 ne[GGUF_MAX_DIMS];
	uint32_t	 type;		/* enum tensor_type, always supported */
	uint64_t	 n_elems;
	uint64_t	 offset;	/* from data_offset */
	uint64_t	 nbytes;
	const void	*data;
};

struct gguf_file {
	const uint8_t		*map;
	size_t			 size;
	int			 fd_mapped;	/* map is ours to munmap */
	uint32_t		 version;
	uint64_t		 alignment;
	uint64_t		 data_offset;
	uint64_t		 n_kv;
	struct gguf_kv		*kv;
	uint64_t		 n_tensors;
	struct gguf_tensor	*tensors;
};

/* Map a file read-only (MAP_PRIVATE) and validate it; NULL and *cause on error. */
struct gguf_file	*gguf_open(const char *path, char **cause);
/* Parse a caller's buffer, which must outlive the result. */
struct gguf_file	*gguf_open_mem(const void *buf, size_t len, char **cause);
void			 gguf_close(struct gguf_file *);

const struct gguf_kv	*gguf_find(const struct gguf_file *, const char *key);
const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *, const char *name);

/*
 * Typed getters: -1 with *cause naming the key when it is missing, of the
 * wrong type or out of range.  Integer getters accept any GGUF integer
 * type whose value fits; gguf_get_f32 accepts FLOAT32 and FLOAT64.
 */
int	 gguf_get_u32(const struct gguf_file *, const char *, uint32_t *, char **cause);
int	 gguf_get_u64(const struct gguf_file *, const char *, uint64_t *, char **cause);
int	 gguf_get_f32(const struct gguf_file *, const char *, float *, char **cause);
int	 gguf_get_bool(const struct gguf_file *, const char *, int *, char **cause);
/* A malloc'd NUL-terminated copy; a NUL inside the string is an error. */
char	*gguf_get_str(const struct gguf_file *, const char *, char **cause);
/* An array whose elements are of type elem; use kv->v.arr.n and .data/.strs. */
const struct gguf_kv *gguf_get_arr(const struct gguf_file *, const char *,
	    enum gguf_vtype elem, char **cause);

/*
 * Check a tensor has the expected shape (dimensions past n_dims count as 1
 * on both sides); the error names the tensor and both shapes.
 */
int	 gguf_tensor_check(const struct gguf_tensor *, uint32_t n_dims,
	    const uint64_t *ne, char **cause);

/* Name of a value type ("uint32", "array"), or "unknown". */
const char *gguf_vtype_name(enum gguf_vtype);
/* Bytes of one element of a scalar type; 0 for STRING, ARRAY and unknown. */
size_t	 gguf_vtype_size(enum gguf_vtype);

/* Element i of a FLOAT32 array kv, read without alignment assumptions. */
static inline float
gguf_arr_f32(const struct gguf_kv *kv, uint64_t i)
{
	float	v;

	memcpy(&v, (const uint8_t *)kv->v.arr.data + i * 4, 4);
	return (v);
}

/* Element i of an INT32 array kv. */
static inline int32_t
gguf_arr_i32(const struct gguf_kv *kv, uint64_t i)
{
	int32_t	v;

	memcpy(&v, (const uint8_t *)kv->v.arr.data + i * 4, 4);
	return (v);
}

/* Element i of a UINT32 array kv. */
static inline uint32_t
gguf_arr_u32(const struct gguf_kv *kv, uint64_t i)
{
	uint32_t v;

	memcpy(&v, (const uint8_t *)kv->v.arr.data + i * 4, 4);
	return (v);
}

#endif
