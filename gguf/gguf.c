/* gguf.c: a validating reader for GGUF v2/v3 model files. */
#include "config.h"

#include <sys/types.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf.h"
#include "tensor_type.h"
#include "util.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the GGUF reader assumes a little-endian host"
#endif

/*
 * The fewest bytes a metadata entry or a tensor description can take.
 * Counts in the header are checked against these before anything is
 * allocated, so a hostile count cannot make us allocate more than the
 * file itself could describe.
 */
#define GGUF_HEADER_SIZE	24	/* magic, version, n_tensors, n_kv */
#define GGUF_MIN_KV		14	/* key length, 1-byte key, type, 1-byte value */
#define GGUF_MIN_TENSOR		33	/* name length, 1-byte name, n_dims, 1 dim, type, offset */

/* A bounds-checked cursor over the file, with a label for errors. */
struct cursor {
	const uint8_t	*p;
	size_t		 size;
	size_t		 off;
	char		 what[320];	/* "key 'general.name'" */
};

static const char *const vtype_names[GGUF_VT_COUNT] = {
	"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
	"bool", "string", "array", "uint64", "int64", "float64",
};

static const size_t vtype_sizes[GGUF_VT_COUNT] = {
	1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8,
};

/* Name of a value type. */
const char *
gguf_vtype_name(enum gguf_vtype t)
{
	if ((unsigned)t >= GGUF_VT_COUNT)
		return ("unknown");
	return (vtype_names[t]);
}

/* Size of one element of a scalar value type, 0 for the others. */
size_t
gguf_vtype_size(enum gguf_vtype t)
{
	if ((unsigned)t >= GGUF_VT_COUNT)
		return (0);
	return (vtype_sizes[t]);
}

/* Set the label that errors from the cursor start with. */
static void
cur_label(struct cursor *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void
cur_label(struct cursor *c, const char *fmt, ...)
{
	va_list	ap;

	va_start(ap, fmt);
	vsnprintf(c->what, sizeof c->what, fmt, ap);
	va_end(ap);
}

/* Copy n bytes from the cursor, or fail naming the field that ran out. */
static int
cur_read(struct cursor *c, void *out, size_t n, const char *field, char **cause)
{
	if (n > c->size - c->off) {
		set_cause(cause, "%s: %s truncated at offset %zu (need %zu "
		    "bytes, file size %zu)", c->what, field, c->off, n, c->size);
		return (-1);
	}
	memcpy(out, c->p + c->off, n);
	c->off += n;
	return (0);
}

/* Read a little-endian uint32. */
static int
cur_u32(struct cursor *c, uint32_t *out, const char *field, char **cause)
{
	return (cur_read(c, out, sizeof *out, field, cause));
}

/* Read a little-endian uint64. */
static int
cur_u64(struct cursor *c, uint64_t *out, const char *field, char **cause)
{
	return (cur_read(c, out, sizeof *out, field, cause));
}

/* Read a length-prefixed string, checking the length against the file. */
static int
cur_str(struct cursor *c, struct gguf_str *s, const char *field, char **cause)
{
	uint64_t	len;

	if (cur_u64(c, &len, field, cause) != 0)
		return (-1);
	if (len > c->size - c->off) {
		set_cause(cause, "%s: %s length %" PRIu64 " past end of file "
		    "(offset %zu, file size %zu)", c->what, field, len, c->off,
		    c->size);
		return (-1);
	}
	s->len = len;
	s->ptr = (const char *)c->p + c->off;
	c->off += len;
	return (0);
}

/* Free what a kv owns. */
static void
kv_free(struct gguf_kv *kv)
{
	free(kv->key);
	if (kv->type == GGUF_VT_ARRAY)
		free(kv->v.arr.strs);
}

/* Release a parsed file, complete or not. */
void
gguf_close(struct gguf_file *gf)
{
	uint64_t	i;

	if (gf == NULL)
		return;
	for (i = 0; gf->kv != NULL && i < gf->n_kv; i++)
		kv_free(&gf->kv[i]);
	free(gf->kv);
	for (i = 0; gf->tensors != NULL && i < gf->n_tensors; i++)
		free(gf->tensors[i].name);
	free(gf->tensors);
	if (gf->fd_mapped && gf->map != NULL)
		munmap((void *)gf->map, gf->size);
	free(gf);
}

/* Store a scalar of type t read from raw little-endian bytes. */
static void
scalar_store(struct gguf_kv *kv, enum gguf_vtype t, const uint8_t *raw)
{
	uint8_t	u8; int8_t i8; uint16_t u16; int16_t i16; uint32_t u32;
	int32_t	i32; float f32; uint64_t u64; int64_t i64; double f64;

	switch (t) {
	case GGUF_VT_UINT8: memcpy(&u8, raw, 1); kv->v.u = u8; break;
	case GGUF_VT_INT8: memcpy(&i8, raw, 1); kv->v.i = i8; break;
	case GGUF_VT_UINT16: memcpy(&u16, raw, 2); kv->v.u = u16; break;
	case GGUF_VT_INT16: memcpy(&i16, raw, 2); kv->v.i = i16; break;
	case GGUF_VT_UINT32: memcpy(&u32, raw, 4); kv->v.u = u32; break;
	case GGUF_VT_INT32: memcpy(&i32, raw, 4); kv->v.i = i32; break;
	case GGUF_VT_FLOAT32: memcpy(&f32, raw, 4); kv->v.f = f32; break;
	case GGUF_VT_UINT64: memcpy(&u64, raw, 8); kv->v.u = u64; break;
	case GGUF_VT_INT64: memcpy(&i64, raw, 8); kv->v.i = i64; break;
	case GGUF_VT_FLOAT64: memcpy(&f64, raw, 8); kv->v.f = f64; break;
	default: break;
	}
}

/* Parse an array value: element type, count, elements. */
static int
parse_array(struct cursor *c, struct gguf_kv *kv, char **cause)
{
	uint32_t	 et;
	uint64_t	 n, i, nbytes;
	size_t		 esz;

	if (cur_u32(c, &et, "array element type", cause) != 0)
		return (-1);
	if (et == GGUF_VT_ARRAY) {
		set_cause(cause, "%s: nested arrays are not supported",
		    c->what);
		return (-1);
	}
	if (et >= GGUF_VT_COUNT) {
		set_cause(cause, "%s: array element type %u out of range "
		    "(max %u)", c->what, et, GGUF_VT_COUNT - 1);
		return (-1);
	}
	if (cur_u64(c, &n, "array length", cause) != 0)
		return (-1);
	kv->v.arr.type = et;
	kv->v.arr.n = 0;
	if (et == GGUF_VT_STRING) {
		/* Each string takes at least its 8-byte length. */
		if (n > (c->size - c->off) / 8) {
			set_cause(cause, "%s: array length %" PRIu64 " past "
			    "end of file (%" PRIu64 " strings of at least 8 "
			    "bytes, %zu bytes left)", c->what, n, n,
			    c->size - c->off);
			return (-1);
		}
		kv->v.arr.strs = xcalloc(n, sizeof *kv->v.arr.strs);
		kv->v.arr.data = c->p + c->off;
		for (i = 0; i < n; i++) {
			if (cur_str(c, &kv->v.arr.strs[i], "array string",
			    cause) != 0)
				return (-1);
		}
		kv->v.arr.n = n;
		return (0);
	}
	esz = vtype_sizes[et];
	if (__builtin_mul_overflow(n, esz, &nbytes)) {
		set_cause(cause, "%s: array length %" PRIu64 " of %s "
		    "overflows", c->what, n, vtype_names[et]);
		return (-1);
	}
	if (nbytes > c->size - c->off) {
		set_cause(cause, "%s: array length %" PRIu64 " of %s past end "
		    "of file (%" PRIu64 " bytes, %zu left)", c->what, n,
		    vtype_names[et], nbytes, c->size - c->off);
		return (-1);
	}
	kv->v.arr.data = c->p + c->off;
	kv->v.arr.n = n;
	c->off += nbytes;
	return (0);
}

/* Parse one metadata entry: key, value type, value. */
static int
parse_kv(struct cursor *c, uint64_t idx, struct gguf_kv *kv, char **cause)
{
	struct gguf_str	 key;
	uint32_t	 t;
	uint8_t		 raw[8];

	cur_label(c, "kv %" PRIu64, idx);
	if (cur_str(c, &key, "key", cause) != 0)
		return (-1);
	if (key.len == 0) {
		set_cause(cause, "%s: empty key", c->what);
		return (-1);
	}
	if (key.len > GGUF_MAX_KEY_LEN) {
		set_cause(cause, "%s: key length %" PRIu64 " exceeds maximum "
		    "%u", c->what, key.len, GGUF_MAX_KEY_LEN);
		return (-1);
	}
	if (memchr(key.ptr, '\0', key.len) != NULL) {
		set_cause(cause, "%s: key contains a NUL byte", c->what);
		return (-1);
	}
	kv->key = xstrndup(key.ptr, key.len);
	cur_label(c, "key '%s'", kv->key);

	if (cur_u32(c, &t, "value type", cause) != 0)
		return (-1);
	if (t >= GGUF_VT_COUNT) {
		set_cause(cause, "%s: value type %u out of range (max %u)",
		    c->what, t, GGUF_VT_COUNT - 1);
		return (-1);
	}
	kv->type = t;
	switch (t) {
	case GGUF_VT_STRING:
		return (cur_str(c, &kv->v.s, "string", cause));
	case GGUF_VT_ARRAY:
		return (parse_array(c, kv, cause));
	case GGUF_VT_BOOL:
		if (cur_read(c, raw, 1, "bool value", cause) != 0)
			return (-1);
		if (raw[0] > 1) {
			set_cause(cause, "%s: bool value %u is not 0 or 1",
			    c->what, raw[0]);
			return (-1);
		}
		kv->v.b = raw[0];
		return (0);
	default:
		if (cur_read(c, raw, vtype_sizes[t], "value", cause) != 0)
			return (-1);
		scalar_store(kv, t, raw);
		return (0);
	}
}

/* qsort comparator: kv pointers by key. */
static int
cmp_kv_key(const void *a, const void *b)
{
	const struct gguf_kv *ka = *(const struct gguf_kv *const *)a;
	const struct gguf_kv *kb = *(const struct gguf_kv *const *)b;

	return (strcmp(ka->key, kb->key));
}

/* qsort comparator: tensor pointers by name. */
static int
cmp_tensor_name(const void *a, const void *b)
{
	const struct gguf_tensor *ta = *(const struct gguf_tensor *const *)a;
	const struct gguf_tensor *tb = *(const struct gguf_tensor *const *)b;

	return (strcmp(ta->name, tb->name));
}

/* qsort comparator: tensor pointers by offset, then size. */
static int
cmp_tensor_offset(const void *a, const void *b)
{
	const struct gguf_tensor *ta = *(const struct gguf_tensor *const *)a;
	const struct gguf_tensor *tb = *(const struct gguf_tensor *const *)b;

	if (ta->offset != tb->offset)
		return (ta->offset < tb->offset ? -1 : 1);
	/* Empty-sized tensors never overlap; order them first. */
	return ((ta->nbytes > tb->nbytes) - (ta->nbytes < tb->nbytes));
}

/* Keys must be unique: sort pointers (n log n, not n^2) and compare neighbours. */
static int
check_keys_unique(struct gguf_file *gf, char **cause)
{
	const struct gguf_kv	**v;
	uint64_t		  i;
	int			  rc = 0;

	if (gf->n_kv < 2)
		return (0);
	v = xreallocarray(NULL, gf->n_kv, sizeof *v);
	for (i = 0; i < gf->n_kv; i++)
		v[i] = &gf->kv[i];
	qsort(v, gf->n_kv, sizeof *v, cmp_kv_key);
	for (i = 1; i < gf->n_kv; i++) {
		if (strcmp(v[i - 1]->key, v[i]->key) == 0) {
			set_cause(cause, "duplicate key '%s'", v[i]->key);
			rc = -1;
			break;
		}
	}
	free(v);
	return (rc);
}

/* Take general.alignment if present: a uint32 power of two, not too big. */
static int
parse_alignment(struct gguf_file *gf, char **cause)
{
	const struct gguf_kv	*kv;

	gf->alignment = GGUF_DEFAULT_ALIGNMENT;
	if ((kv = gguf_find(gf, "general.alignment")) == NULL)
		return (0);
	if (kv->type != GGUF_VT_UINT32) {
		set_cause(cause, "general.alignment has type %s, want uint32",
		    gguf_vtype_name(kv->type));
		return (-1);
	}
	if (kv->v.u == 0 || (kv->v.u & (kv->v.u - 1)) != 0) {
		set_cause(cause, "general.alignment %" PRIu64 " is not a "
		    "nonzero power of two", kv->v.u);
		return (-1);
	}
	if (kv->v.u > GGUF_MAX_ALIGNMENT) {
		set_cause(cause, "general.alignment %" PRIu64 " exceeds "
		    "maximum %u", kv->v.u, GGUF_MAX_ALIGNMENT);
		return (-1);
	}
	gf->alignment = kv->v.u;
	return (0);
}

/* Parse one tensor description and check its shape, type and size. */
static int
parse_tensor(struct cursor *c, struct gguf_file *gf, uint64_t idx,
    struct gguf_tensor *t, char **cause)
{
	const struct tensor_type_info	*ti;
	const char			*tn;
	struct gguf_str			 name;
	uint64_t			 n, blocks;
	uint32_t			 d;

	cur_label(c, "tensor %" PRIu64, idx);
	if (cur_str(c, &name, "name", cause) != 0)
		return (-1);
	if (name.len == 0) {
		set_cause(cause, "%s: empty name", c->what);
		return (-1);
	}
	if (name.len > GGUF_MAX_NAME_LEN) {
		set_cause(cause, "%s: name length %" PRIu64 " exceeds maximum "
		    "%u", c->what, name.len, GGUF_MAX_NAME_LEN);
		return (-1);
	}
	if (memchr(name.ptr, '\0', name.len) != NULL) {
		set_cause(cause, "%s: name contains a NUL byte", c->what);
		return (-1);
	}
	t->name = xstrndup(name.ptr, name.len);
	cur_label(c, "tensor '%s'", t->name);

	if (cur_u32(c, &t->n_dims, "n_dims", cause) != 0)
		return (-1);
	if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS) {
		set_cause(cause, "%s: n_dims %u out of range 1..%d", c->what,
		    t->n_dims, GGUF_MAX_DIMS);
		return (-1);
	}
	n = 1;
	for (d = 0; d < GGUF_MAX_DIMS; d++)
		t->ne[d] = 1;
	for (d = 0; d < t->n_dims; d++) {
		if (cur_u64(c, &t->ne[d], "dimension", cause) != 0)
			return (-1);
		if (t->ne[d] == 0) {
			set_cause(cause, "%s: dimension %u is 0", c->what, d);
			return (-1);
		}
		if ((int64_t)t->ne[d] < 0) {
			set_cause(cause, "%s: dimension %u is negative "
			    "(%" PRId64 ")", c->what, d, (int64_t)t->ne[d]);
			return (-1);
		}
		if (t->ne[d] > GGUF_MAX_DIM) {
			set_cause(cause, "%s: dimension %u is %" PRIu64 ", "
			    "above maximum %llu", c->what, d, t->ne[d],
			    GGUF_MAX_DIM);
			return (-1);
		}
		if (__builtin_mul_overflow(n, t->ne[d], &n)) {
			set_cause(cause, "%s: element count overflows "
			    "(dimensions %" PRIu64 " x %" PRIu64 " x %" PRIu64
			    " x %" PRIu64 ")", c->what, t->ne[0], t->ne[1],
			    t->ne[2], t->ne[3]);
			return (-1);
		}
	}
	t->n_elems = n;

	if (cur_u32(c, &t->type, "type", cause) != 0)
		return (-1);
	if ((tn = tensor_type_name(t->type)) == NULL) {
		set_cause(cause, "%s: type %u is not a GGUF tensor type",
		    c->what, t->type);
		return (-1);
	}
	if ((ti = tensor_type_get(t->type)) == NULL) {
		set_cause(cause, "unsupported tensor type %s for tensor '%s'",
		    tn, t->name);
		return (-1);
	}
	if (t->ne[0] % ti->block_elems != 0) {
		set_cause(cause, "%s: first dimension %" PRIu64 " is not a "
		    "multiple of the %s block size %u", c->what, t->ne[0],
		    ti->name, ti->block_elems);
		return (-1);
	}
	blocks = n / ti->block_elems;
	if (__builtin_mul_overflow(blocks, (uint64_t)ti->block_bytes,
	    &t->nbytes)) {
		set_cause(cause, "%s: byte size overflows (%" PRIu64 " "
		    "elements of %s)", c->what, n, ti->name);
		return (-1);
	}

	if (cur_u64(c, &t->offset, "offset", cause) != 0)
		return (-1);
	if (t->offset % gf->alignment != 0) {
		set_cause(cause, "%s: offset %" PRIu64 " is not a multiple of "
		    "the alignment %" PRIu64, c->what, t->offset,
		    gf->alignment);
		return (-1);
	}
	return (0);
}

/* Check every tensor's data lies inside the file and none overlap. */
static int
check_tensor_data(struct gguf_file *gf, char **cause)
{
	const struct gguf_tensor	**v;
	struct gguf_tensor		 *t;
	uint64_t			  i, avail, end;
	int				  rc = 0;

	if (gf->n_tensors == 0)
		return (0);
	if (gf->data_offset > gf->size) {
		set_cause(cause, "data section start %" PRIu64 " (aligned to "
		    "%" PRIu64 ") past end of file (size %zu)",
		    gf->data_offset, gf->alignment, gf->size);
		return (-1);
	}
	avail = gf->size - gf->data_offset;
	for (i = 0; i < gf->n_tensors; i++) {
		t = &gf->tensors[i];
		if (t->offset > avail) {
			set_cause(cause, "tensor '%s': offset %" PRIu64 " past "
			    "end of file (data section has %" PRIu64 " bytes)",
			    t->name, t->offset, avail);
			return (-1);
		}
		if (t->nbytes > avail - t->offset) {
			set_cause(cause, "tensor '%s': data of %" PRIu64
			    " bytes at offset %" PRIu64 " runs %" PRIu64
			    " bytes past end of file (data section has %"
			    PRIu64 " bytes)", t->name, t->nbytes, t->offset,
			    t->nbytes - (avail - t->offset), avail);
			return (-1);
		}
		t->data = gf->map + gf->data_offset + t->offset;
	}

	v = xreallocarray(NULL, gf->n_tensors, sizeof *v);
	for (i = 0; i < gf->n_tensors; i++)
		v[i] = &gf->tensors[i];
	qsort(v, gf->n_tensors, sizeof *v, cmp_tensor_name);
	for (i = 1; i < gf->n_tensors; i++) {
		if (strcmp(v[i - 1]->name, v[i]->name) == 0) {
			set_cause(cause, "duplicate tensor name '%s'",
			    v[i]->name);
			rc = -1;
			goto out;
		}
	}
	qsort(v, gf->n_tensors, sizeof *v, cmp_tensor_offset);
	for (i = 1; i < gf->n_tensors; i++) {
		end = v[i - 1]->offset + v[i - 1]->nbytes;	/* checked above */
		if (v[i]->offset < end) {
			set_cause(cause, "tensors '%s' and '%s' overlap ('%s' "
			    "ends at %" PRIu64 ", '%s' starts at %" PRIu64 ")",
			    v[i - 1]->name, v[i]->name, v[i - 1]->name, end,
			    v[i]->name, v[i]->offset);
			rc = -1;
			goto out;
		}
		/*
		 * Writers put each tensor at the next aligned offset after
		 * the one before: more room than the padding means the type
		 * or shape of that tensor was changed (a smaller type read
		 * over a larger tensor's data).
		 */
		if (v[i]->offset - end >= gf->alignment) {
			set_cause(cause, "tensor '%s' (%s, %" PRIu64 " bytes) "
			    "is followed by %" PRIu64 " unused bytes before "
			    "'%s' (alignment %" PRIu64 "): its type or shape "
			    "does not match its data", v[i - 1]->name,
			    tensor_type_name(v[i - 1]->type), v[i - 1]->nbytes,
			    v[i]->offset - end, v[i]->name, gf->alignment);
			rc = -1;
			goto out;
		}
	}
	if (gf->n_tensors > 0 && (end = gf->size - gf->data_offset -
	    (v[gf->n_tensors - 1]->offset + v[gf->n_tensors - 1]->nbytes)) >=
	    gf->alignment) {
		set_cause(cause, "tensor '%s' (%s, %" PRIu64 " bytes), the last "
		    "in the file, is followed by %" PRIu64 " unused bytes "
		    "(alignment %" PRIu64 "): its type or shape does not match "
		    "its data", v[gf->n_tensors - 1]->name,
		    tensor_type_name(v[gf->n_tensors - 1]->type),
		    v[gf->n_tensors - 1]->nbytes, end, gf->alignment);
		rc = -1;
		goto out;
	}
out:
	free(v);
	return (rc);
}

/* Parse and validate a complete GGUF image. */
static int
parse(struct gguf_file *gf, char **cause)
{
	struct cursor	c;
	uint8_t		magic[4];
	uint64_t	n_kv, n_tensors, i, pad;

	memset(&c, 0, sizeof c);
	c.p = gf->map;
	c.size = gf->size;
	cur_label(&c, "header");

	if (cur_read(&c, magic, 4, "magic", cause) != 0)
		return (-1);
	if (memcmp(magic, "GGUF", 4) != 0) {
		set_cause(cause, "bad magic %02x %02x %02x %02x (not a GGUF "
		    "file)", magic[0], magic[1], magic[2], magic[3]);
		return (-1);
	}
	if (cur_u32(&c, &gf->version, "version", cause) != 0)
		return (-1);
	if (gf->version != 2 && gf->version != 3) {
		set_cause(cause, "unsupported gguf version %u (need 2 or 3%s)",
		    gf->version, (gf->version & 0xffff) == 0 ?
		    "; big-endian file?" : "");
		return (-1);
	}
	if (cur_u64(&c, &n_tensors, "tensor count", cause) != 0 ||
	    cur_u64(&c, &n_kv, "kv count", cause) != 0)
		return (-1);
	if (n_tensors > (c.size - c.off) / GGUF_MIN_TENSOR) {
		set_cause(cause, "tensor count %" PRIu64 " exceeds what a "
		    "%zu-byte file can hold (%d bytes each at least)",
		    n_tensors, c.size, GGUF_MIN_TENSOR);
		return (-1);
	}
	if (n_kv > (c.size - c.off) / GGUF_MIN_KV) {
		set_cause(cause, "kv count %" PRIu64 " exceeds what a %zu-byte "
		    "file can hold (%d bytes each at least)", n_kv, c.size,
		    GGUF_MIN_KV);
		return (-1);
	}
	if (n_tensors > GGUF_MAX_TENSORS) {
		set_cause(cause, "tensor count %" PRIu64 " exceeds maximum %u",
		    n_tensors, GGUF_MAX_TENSORS);
		return (-1);
	}
	if (n_kv > GGUF_MAX_KV) {
		set_cause(cause, "kv count %" PRIu64 " exceeds maximum %u",
		    n_kv, GGUF_MAX_KV);
		return (-1);
	}

	gf->kv = xcalloc(n_kv, sizeof *gf->kv);
	gf->n_kv = n_kv;
	for (i = 0; i < n_kv; i++) {
		if (parse_kv(&c, i, &gf->kv[i], cause) != 0)
			return (-1);
	}
	if (check_keys_unique(gf, cause) != 0)
		return (-1);
	if (parse_alignment(gf, cause) != 0)
		return (-1);

	/* Re-check against what is left now that the metadata is read. */
	if (n_tensors > (c.size - c.off) / GGUF_MIN_TENSOR) {
		set_cause(cause, "tensor count %" PRIu64 " exceeds what the "
		    "%zu bytes after the metadata can hold", n_tensors,
		    c.size - c.off);
		return (-1);
	}
	gf->tensors = xcalloc(n_tensors, sizeof *gf->tensors);
	gf->n_tensors = n_tensors;
	for (i = 0; i < n_tensors; i++) {
		if (parse_tensor(&c, gf, i, &gf->tensors[i], cause) != 0)
			return (-1);
	}

	/* Data starts at the next multiple of the alignment. */
	pad = (gf->alignment - c.off % gf->alignment) % gf->alignment;
	gf->data_offset = (uint64_t)c.off + pad;
	return (check_tensor_data(gf, cause));
}

/* Parse a caller's buffer. */
struct gguf_file *
gguf_open_mem(const void *buf, size_t len, char **cause)
{
	struct gguf_file	*gf;

	gf = xcalloc(1, sizeof *gf);
	gf->map = buf;
	gf->size = len;
	if (buf == NULL && len != 0) {
		set_cause(cause, "no buffer");
		free(gf);
		return (NULL);
	}
	if (parse(gf, cause) != 0) {
		gguf_close(gf);
		return (NULL);
	}
	return (gf);
}

/* Map a file and parse it. */
struct gguf_file *
gguf_open(const char *path, char **cause)
{
	struct gguf_file	*gf;
	struct stat		 st;
	void			*map;
	char			*why = NULL;
	int			 fd;

	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) == -1) {
		set_cause(cause, "%s: %s", path, strerror(errno));
		return (NULL);
	}
	if (fstat(fd, &st) == -1) {
		set_cause(cause, "%s: %s", path, strerror(errno));
		close(fd);
		return (NULL);
	}
	if (!S_ISREG(st.st_mode)) {
		set_cause(cause, "%s: not a regular file", path);
		close(fd);
		return (NULL);
	}
	if (st.st_size < GGUF_HEADER_SIZE) {
		set_cause(cause, "%s: file too short for a GGUF header (%jd "
		    "bytes, need %d)", path, (intmax_t)st.st_size,
		    GGUF_HEADER_SIZE);
		close(fd);
		return (NULL);
	}
	if ((uintmax_t)st.st_size > SIZE_MAX) {
		set_cause(cause, "%s: file too large to map", path);
		close(fd);
		return (NULL);
	}
	map = mmap(NULL, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (map == MAP_FAILED) {
		set_cause(cause, "%s: mmap: %s", path, strerror(errno));
		return (NULL);
	}

	gf = xcalloc(1, sizeof *gf);
	gf->map = map;
	gf->size = st.st_size;
	gf->fd_mapped = 1;
	if (parse(gf, &why) != 0) {
		set_cause(cause, "%s: %s", path, why);
		free(why);
		gguf_close(gf);
		return (NULL);
	}
	return (gf);
}

/* Find a key; NULL if absent. */
const struct gguf_kv *
gguf_find(const struct gguf_file *gf, const char *key)
{
	uint64_t	i;

	for (i = 0; i < gf->n_kv; i++) {
		if (gf->kv[i].key != NULL && strcmp(gf->kv[i].key, key) == 0)
			return (&gf->kv[i]);
	}
	return (NULL);
}

/* Find a tensor by name; NULL if absent. */
const struct gguf_tensor *
gguf_find_tensor(const struct gguf_file *gf, const char *name)
{
	uint64_t	i;

	for (i = 0; i < gf->n_tensors; i++) {
		if (gf->tensors[i].name != NULL &&
		    strcmp(gf->tensors[i].name, name) == 0)
			return (&gf->tensors[i]);
	}
	return (NULL);
}

/* Find a key or fail naming it. */
static const struct gguf_kv *
find_or_fail(const struct gguf_file *gf, const char *key, char **cause)
{
	const struct gguf_kv	*kv;

	if ((kv = gguf_find(gf, key)) == NULL)
		set_cause(cause, "missing key '%s'", key);
	return (kv);
}

/* Whether a value type is a signed integer. */
static int
vtype_is_signed(enum gguf_vtype t)
{
	return (t == GGUF_VT_INT8 || t == GGUF_VT_INT16 ||
	    t == GGUF_VT_INT32 || t == GGUF_VT_INT64);
}

/* Whether a value type is an unsigned integer. */
static int
vtype_is_unsigned(enum gguf_vtype t)
{
	return (t == GGUF_VT_UINT8 || t == GGUF_VT_UINT16 ||
	    t == GGUF_VT_UINT32 || t == GGUF_VT_UINT64);
}

/* Read any integer key as unsigned, failing if negative or above max. */
static int
get_uint(const struct gguf_file *gf, const char *key, uint64_t max,
    uint64_t *out, char **cause)
{
	const struct gguf_kv	*kv;

	if ((kv = find_or_fail(gf, key, cause)) == NULL)
		return (-1);
	if (vtype_is_signed(kv->type)) {
		if (kv->v.i < 0 || (uint64_t)kv->v.i > max) {
			set_cause(cause, "key '%s': value %" PRId64 " out of "
			    "range 0..%" PRIu64, key, kv->v.i, max);
			return (-1);
		}
		*out = kv->v.i;
		return (0);
	}
	if (vtype_is_unsigned(kv->type)) {
		if (kv->v.u > max) {
			set_cause(cause, "key '%s': value %" PRIu64 " out of "
			    "range 0..%" PRIu64, key, kv->v.u, max);
			return (-1);
		}
		*out = kv->v.u;
		return (0);
	}
	set_cause(cause, "key '%s' has type %s, want an integer", key,
	    gguf_vtype_name(kv->type));
	return (-1);
}

/* Get an integer key that fits 32 bits unsigned. */
int
gguf_get_u32(const struct gguf_file *gf, const char *key, uint32_t *out,
    char **cause)
{
	uint64_t	v;

	if (get_uint(gf, key, UINT32_MAX, &v, cause) != 0)
		return (-1);
	*out = v;
	return (0);
}

/* Get a non-negative integer key. */
int
gguf_get_u64(const struct gguf_file *gf, const char *key, uint64_t *out,
    char **cause)
{
	return (get_uint(gf, key, UINT64_MAX, out, cause));
}

/* Get a float key (FLOAT32 or FLOAT64 that fits a float). */
int
gguf_get_f32(const struct gguf_file *gf, const char *key, float *out,
    char **cause)
{
	const struct gguf_kv	*kv;

	if ((kv = find_or_fail(gf, key, cause)) == NULL)
		return (-1);
	if (kv->type != GGUF_VT_FLOAT32 && kv->type != GGUF_VT_FLOAT64) {
		set_cause(cause, "key '%s' has type %s, want a float", key,
		    gguf_vtype_name(kv->type));
		return (-1);
	}
	if (kv->type == GGUF_VT_FLOAT64 && isfinite(kv->v.f) &&
	    fabs(kv->v.f) > FLT_MAX) {
		set_cause(cause, "key '%s': value %g out of float range", key,
		    kv->v.f);
		return (-1);
	}
	*out = (float)kv->v.f;
	return (0);
}

/* Get a bool key. */
int
gguf_get_bool(const struct gguf_file *gf, const char *key, int *out,
    char **cause)
{
	const struct gguf_kv	*kv;

	if ((kv = find_or_fail(gf, key, cause)) == NULL)
		return (-1);
	if (kv->type != GGUF_VT_BOOL) {
		set_cause(cause, "key '%s' has type %s, want bool", key,
		    gguf_vtype_name(kv->type));
		return (-1);
	}
	*out = kv->v.b;
	return (0);
}

/* Get a string key as a new NUL-terminated string. */
char *
gguf_get_str(const struct gguf_file *gf, const char *key, char **cause)
{
	const struct gguf_kv	*kv;

	if ((kv = find_or_fail(gf, key, cause)) == NULL)
		return (NULL);
	if (kv->type != GGUF_VT_STRING) {
		set_cause(cause, "key '%s' has type %s, want string", key,
		    gguf_vtype_name(kv->type));
		return (NULL);
	}
	if (memchr(kv->v.s.ptr, '\0', kv->v.s.len) != NULL) {
		set_cause(cause, "key '%s': string contains a NUL byte", key);
		return (NULL);
	}
	/* The length was checked against the file, which is in memory. */
	return (xstrndup(kv->v.s.ptr, kv->v.s.len));
}

/* Get an array key whose elements have the given type. */
const struct gguf_kv *
gguf_get_arr(const struct gguf_file *gf, const char *key,
    enum gguf_vtype elem, char **cause)
{
	const struct gguf_kv	*kv;

	if ((kv = find_or_fail(gf, key, cause)) == NULL)
		return (NULL);
	if (kv->type != GGUF_VT_ARRAY) {
		set_cause(cause, "key '%s' has type %s, want an array of %s",
		    key, gguf_vtype_name(kv->type), gguf_vtype_name(elem));
		return (NULL);
	}
	if (kv->v.arr.type != elem) {
		set_cause(cause, "key '%s' is an array of %s, want an array "
		    "of %s", key, gguf_vtype_name(kv->v.arr.type),
		    gguf_vtype_name(elem));
		return (NULL);
	}
	return (kv);
}

/* Format a shape as "[a, b, c]" into buf. */
static void
shape_str(char *buf, size_t len, uint32_t n_dims, const uint64_t *ne)
{
	size_t		off = 0;
	uint32_t	d;

	off += snprintf(buf, len, "[");
	for (d = 0; d < n_dims && off < len; d++)
		off += snprintf(buf + off, len - off, "%s%" PRIu64,
		    d == 0 ? "" : ", ", ne[d]);
	if (off < len)
		snprintf(buf + off, len - off, "]");
}

/* Check a tensor's shape against the expected one. */
int
gguf_tensor_check(const struct gguf_tensor *t, uint32_t n_dims,
    const uint64_t *ne, char **cause)
{
	char		want[128], got[128];
	uint32_t	d;
	uint64_t	e;

	if (n_dims > GGUF_MAX_DIMS) {
		set_cause(cause, "tensor '%s': expected n_dims %u above "
		    "maximum %d", t->name, n_dims, GGUF_MAX_DIMS);
		return (-1);
	}
	for (d = 0; d < GGUF_MAX_DIMS; d++) {
		e = d < n_dims ? ne[d] : 1;
		if (t->ne[d] != e)
			break;
	}
	if (d == GGUF_MAX_DIMS)
		return (0);
	shape_str(want, sizeof want, n_dims, ne);
	shape_str(got, sizeof got, t->n_dims, t->ne);
	set_cause(cause, "tensor '%s': shape %s, expected %s", t->name, got,
	    want);
	return (-1);
}
