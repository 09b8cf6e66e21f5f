/* gguf_write.c: a streaming writer for GGUF v3 files. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf.h"
#include "gguf_write.h"
#include "log.h"
#include "tensor_type.h"
#include "util.h"

struct gguf_wtensor {
	char		*name;
	uint32_t	 n_dims;
	uint64_t	 ne[GGUF_MAX_DIMS];
	uint32_t	 type;
	uint64_t	 offset;
	uint64_t	 nbytes;
	const void	*data;		/* or NULL: the fill callback puts it */
};

struct gguf_writer {
	/* Metadata, serialized as it is added. */
	uint8_t			*kv;
	size_t			 kv_len;
	size_t			 kv_cap;
	uint64_t		 n_kv;
	char			**keys;

	struct gguf_wtensor	*t;
	uint64_t		 n_t;
	uint64_t		 data_len;	/* end of the last tensor */
	uint32_t		 alignment;

	char			*error;		/* first problem, reported at open */

	/* While writing. */
	FILE			*f;
	char			*path;
	char			*tmp;
	uint64_t		 cur;		/* tensor being put */
	uint64_t		 done;		/* its bytes put so far */
	uint64_t		 written;
};

/* Remember the first error; later ones are usually consequences. */
static void
w_error(struct gguf_writer *w, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void
w_error(struct gguf_writer *w, const char *fmt, ...)
{
	va_list	ap;

	if (w->error != NULL)
		return;
	va_start(ap, fmt);
	if (vasprintf(&w->error, fmt, ap) < 0)
		w->error = NULL;
	va_end(ap);
}

/* Create an empty writer. */
struct gguf_writer *
gguf_writer_new(void)
{
	struct gguf_writer	*w;

	w = xcalloc(1, sizeof *w);
	w->alignment = GGUF_DEFAULT_ALIGNMENT;
	return (w);
}

/* Free a writer, removing a half-written file. */
void
gguf_writer_free(struct gguf_writer *w)
{
	uint64_t	i;

	if (w == NULL)
		return;
	if (w->f != NULL) {
		fclose(w->f);
		unlink(w->tmp);
	}
	free(w->path);
	free(w->tmp);
	for (i = 0; i < w->n_kv; i++)
		free(w->keys[i]);
	free(w->keys);
	free(w->kv);
	for (i = 0; i < w->n_t; i++)
		free(w->t[i].name);
	free(w->t);
	free(w->error);
	free(w);
}

/* Append bytes to the serialized metadata. */
static void
kv_put(struct gguf_writer *w, const void *p, size_t n)
{
	if (n == 0)
		return;
	if (n > w->kv_cap - w->kv_len) {
		if (n > SIZE_MAX / 2 - w->kv_len)
			fatalx("gguf writer: metadata too large");
		w->kv_cap = (w->kv_len + n) * 2;
		w->kv = xreallocarray(w->kv, w->kv_cap, 1);
	}
	memcpy(w->kv + w->kv_len, p, n);
	w->kv_len += n;
}

/* Append a little-endian uint32. */
static void
kv_u32(struct gguf_writer *w, uint32_t v)
{
	kv_put(w, &v, 4);
}

/* Append a little-endian uint64. */
static void
kv_u64(struct gguf_writer *w, uint64_t v)
{
	kv_put(w, &v, 8);
}

/* Append a length-prefixed string. */
static void
kv_strn(struct gguf_writer *w, const char *s, size_t len)
{
	kv_u64(w, len);
	kv_put(w, s, len);
}

/* Start an entry: check the key is new, write it and the value type. */
static void
kv_begin(struct gguf_writer *w, const char *key, enum gguf_vtype t)
{
	uint64_t	i;

	if (*key == '\0')
		w_error(w, "empty key");
	if (strlen(key) > GGUF_MAX_KEY_LEN)
		w_error(w, "key '%.32s...' longer than %u bytes", key,
		    GGUF_MAX_KEY_LEN);
	for (i = 0; i < w->n_kv; i++) {
		if (strcmp(w->keys[i], key) == 0)
			w_error(w, "duplicate key '%s'", key);
	}
	w->keys = xreallocarray(w->keys, w->n_kv + 1, sizeof *w->keys);
	w->keys[w->n_kv++] = xstrdup(key);
	kv_strn(w, key, strlen(key));
	kv_u32(w, t);
}

/* Add a scalar of a type whose bytes are at p. */
static void
add_scalar(struct gguf_writer *w, const char *key, enum gguf_vtype t,
    const void *p)
{
	kv_begin(w, key, t);
	kv_put(w, p, gguf_vtype_size(t));
}

/* Add a uint8. */
void
gguf_writer_add_u8(struct gguf_writer *w, const char *k, uint8_t v)
{
	add_scalar(w, k, GGUF_VT_UINT8, &v);
}

/* Add a int8. */
void
gguf_writer_add_i8(struct gguf_writer *w, const char *k, int8_t v)
{
	add_scalar(w, k, GGUF_VT_INT8, &v);
}

/* Add a uint16. */
void
gguf_writer_add_u16(struct gguf_writer *w, const char *k, uint16_t v)
{
	add_scalar(w, k, GGUF_VT_UINT16, &v);
}

/* Add a int16. */
void
gguf_writer_add_i16(struct gguf_writer *w, const char *k, int16_t v)
{
	add_scalar(w, k, GGUF_VT_INT16, &v);
}

/* Add a uint32; general.alignment also sets the data alignment. */
void
gguf_writer_add_u32(struct gguf_writer *w, const char *k, uint32_t v)
{
	if (strcmp(k, "general.alignment") == 0) {
		if (v == 0 || (v & (v - 1)) != 0 || v > GGUF_MAX_ALIGNMENT)
			w_error(w, "general.alignment %u is not a power of two "
			    "up to %u", v, GGUF_MAX_ALIGNMENT);
		else if (w->n_t != 0)
			w_error(w, "general.alignment set after tensors");
		else
			w->alignment = v;
	}
	add_scalar(w, k, GGUF_VT_UINT32, &v);
}

/* Add a int32. */
void
gguf_writer_add_i32(struct gguf_writer *w, const char *k, int32_t v)
{
	add_scalar(w, k, GGUF_VT_INT32, &v);
}

/* Add a uint64. */
void
gguf_writer_add_u64(struct gguf_writer *w, const char *k, uint64_t v)
{
	add_scalar(w, k, GGUF_VT_UINT64, &v);
}

/* Add a int64. */
void
gguf_writer_add_i64(struct gguf_writer *w, const char *k, int64_t v)
{
	add_scalar(w, k, GGUF_VT_INT64, &v);
}

/* Add a float32. */
void
gguf_writer_add_f32(struct gguf_writer *w, const char *k, float v)
{
	add_scalar(w, k, GGUF_VT_FLOAT32, &v);
}

/* Add a float64. */
void
gguf_writer_add_f64(struct gguf_writer *w, const char *k, double v)
{
	add_scalar(w, k, GGUF_VT_FLOAT64, &v);
}

/* Add a bool, stored as one byte 0 or 1. */
void
gguf_writer_add_bool(struct gguf_writer *w, const char *k, int v)
{
	uint8_t	b = v ? 1 : 0;

	add_scalar(w, k, GGUF_VT_BOOL, &b);
}

/* Add a string of len bytes. */
void
gguf_writer_add_strn(struct gguf_writer *w, const char *k, const char *s,
    size_t len)
{
	kv_begin(w, k, GGUF_VT_STRING);
	kv_strn(w, s, len);
}

/* Add a NUL-terminated string. */
void
gguf_writer_add_str(struct gguf_writer *w, const char *k, const char *s)
{
	gguf_writer_add_strn(w, k, s, strlen(s));
}

/* Add an array of scalars. */
void
gguf_writer_add_arr(struct gguf_writer *w, const char *k,
    enum gguf_vtype elem, const void *data, uint64_t n)
{
	size_t	esz = gguf_vtype_size(elem);

	if (esz == 0) {
		w_error(w, "key '%s': array of %s is not an array of scalars",
		    k, gguf_vtype_name(elem));
		return;
	}
	if (n > SIZE_MAX / esz) {
		w_error(w, "key '%s': array of %" PRIu64 " elements too large",
		    k, n);
		return;
	}
	kv_begin(w, k, GGUF_VT_ARRAY);
	kv_u32(w, elem);
	kv_u64(w, n);
	kv_put(w, data, n * esz);
}

/* Add an array of NUL-terminated strings. */
void
gguf_writer_add_arr_str(struct gguf_writer *w, const char *k,
    const char *const *strs, uint64_t n)
{
	uint64_t	i;

	kv_begin(w, k, GGUF_VT_ARRAY);
	kv_u32(w, GGUF_VT_STRING);
	kv_u64(w, n);
	for (i = 0; i < n; i++)
		kv_strn(w, strs[i], strlen(strs[i]));
}

/* Copy an entry from a parsed file, keeping its exact type. */
int
gguf_writer_copy_kv(struct gguf_writer *w, const struct gguf_kv *kv)
{
	uint8_t		raw[8];
	uint64_t	i;

	switch (kv->type) {
	case GGUF_VT_STRING:
		gguf_writer_add_strn(w, kv->key, kv->v.s.ptr, kv->v.s.len);
		break;
	case GGUF_VT_ARRAY:
		if (kv->v.arr.type == GGUF_VT_STRING) {
			kv_begin(w, kv->key, GGUF_VT_ARRAY);
			kv_u32(w, GGUF_VT_STRING);
			kv_u64(w, kv->v.arr.n);
			for (i = 0; i < kv->v.arr.n; i++)
				kv_strn(w, kv->v.arr.strs[i].ptr,
				    kv->v.arr.strs[i].len);
		} else
			gguf_writer_add_arr(w, kv->key, kv->v.arr.type,
			    kv->v.arr.data, kv->v.arr.n);
		break;
	case GGUF_VT_BOOL:
		gguf_writer_add_bool(w, kv->key, kv->v.b);
		break;
	case GGUF_VT_UINT8: case GGUF_VT_UINT16: case GGUF_VT_UINT32:
	case GGUF_VT_UINT64:
		/* Little-endian: the low bytes of v.u are the value. */
		if (kv->type == GGUF_VT_UINT32)
			gguf_writer_add_u32(w, kv->key, kv->v.u);
		else {
			memcpy(raw, &kv->v.u, 8);
			add_scalar(w, kv->key, kv->type, raw);
		}
		break;
	case GGUF_VT_INT8: case GGUF_VT_INT16: case GGUF_VT_INT32:
	case GGUF_VT_INT64:
		memcpy(raw, &kv->v.i, 8);
		add_scalar(w, kv->key, kv->type, raw);
		break;
	case GGUF_VT_FLOAT32:
		gguf_writer_add_f32(w, kv->key, (float)kv->v.f);
		break;
	case GGUF_VT_FLOAT64:
		gguf_writer_add_f64(w, kv->key, kv->v.f);
		break;
	default:
		w_error(w, "key '%s': cannot copy value type %u", kv->key,
		    kv->type);
		return (-1);
	}
	return (w->error == NULL ? 0 : -1);
}

/* Describe a tensor, placing it after the previous one. */
uint64_t
gguf_writer_add_tensor_data(struct gguf_writer *w, const char *name,
    uint32_t n_dims, const uint64_t *ne, uint32_t type, const void *data)
{
	const struct tensor_type_info	*ti;
	struct gguf_wtensor		*t;
	uint64_t			 n = 1, i, pad;
	uint32_t			 d;

	for (i = 0; i < w->n_t; i++) {
		if (strcmp(w->t[i].name, name) == 0)
			w_error(w, "duplicate tensor name '%s'", name);
	}
	w->t = xreallocarray(w->t, w->n_t + 1, sizeof *w->t);
	t = &w->t[w->n_t];
	memset(t, 0, sizeof *t);
	t->name = xstrdup(name);
	t->type = type;
	t->data = data;
	if (*name == '\0' || strlen(name) > GGUF_MAX_NAME_LEN)
		w_error(w, "tensor name '%s' empty or longer than %u bytes",
		    name, GGUF_MAX_NAME_LEN);
	if (n_dims < 1 || n_dims > GGUF_MAX_DIMS) {
		w_error(w, "tensor '%s': n_dims %u out of range 1..%d", name,
		    n_dims, GGUF_MAX_DIMS);
		n_dims = 1;
		ne = &n;
	}
	t->n_dims = n_dims;
	for (d = 0; d < GGUF_MAX_DIMS; d++) {
		t->ne[d] = d < n_dims ? ne[d] : 1;
		if (t->ne[d] == 0 || t->ne[d] > GGUF_MAX_DIM ||
		    __builtin_mul_overflow(n, t->ne[d], &n))
			w_error(w, "tensor '%s': bad dimension %u", name, d);
	}
	if ((ti = tensor_type_get(type)) == NULL)
		w_error(w, "tensor '%s': unsupported type %u", name, type);
	else if (t->ne[0] % ti->block_elems != 0)
		w_error(w, "tensor '%s': first dimension %" PRIu64 " is not a "
		    "multiple of the %s block size %u", name, t->ne[0],
		    ti->name, ti->block_elems);
	else if (__builtin_mul_overflow(n / ti->block_elems,
	    (uint64_t)ti->block_bytes, &t->nbytes))
		w_error(w, "tensor '%s': byte size overflows", name);
	pad = (w->alignment - w->data_len % w->alignment) % w->alignment;
	t->offset = w->data_len + pad;
	w->data_len = t->offset + t->nbytes;
	return (w->n_t++);
}

/* Describe a tensor whose data is put later. */
uint64_t
gguf_writer_add_tensor(struct gguf_writer *w, const char *name,
    uint32_t n_dims, const uint64_t *ne, uint32_t type)
{
	return (gguf_writer_add_tensor_data(w, name, n_dims, ne, type, NULL));
}

/* Write bytes to the file. */
static int
out(struct gguf_writer *w, const void *p, size_t n, char **cause)
{
	if (n != 0 && fwrite(p, 1, n, w->f) != n) {
		set_cause(cause, "%s: %s", w->tmp, strerror(errno));
		return (-1);
	}
	w->written += n;
	return (0);
}

/* Write n zero bytes. */
static int
out_zeros(struct gguf_writer *w, uint64_t n, char **cause)
{
	static const uint8_t	zeros[64];
	size_t			k;

	while (n > 0) {
		k = n > sizeof zeros ? sizeof zeros : n;
		if (out(w, zeros, k, cause) != 0)
			return (-1);
		n -= k;
	}
	return (0);
}

/* Create PATH.tmp and write the header, metadata and tensor descriptions. */
int
gguf_writer_open(struct gguf_writer *w, const char *path, char **cause)
{
	struct gguf_wtensor	*t;
	uint32_t		 u32;
	uint64_t		 u64, i;
	uint32_t		 d;

	if (w->error != NULL) {
		set_cause(cause, "%s", w->error);
		return (-1);
	}
	if (w->f != NULL) {
		set_cause(cause, "%s: already open", w->tmp);
		return (-1);
	}
	free(w->path);
	free(w->tmp);
	w->path = xstrdup(path);
	xasprintf(&w->tmp, "%s.tmp", path);
	if ((w->f = fopen(w->tmp, "wb")) == NULL) {
		set_cause(cause, "%s: %s", w->tmp, strerror(errno));
		return (-1);
	}
	setvbuf(w->f, NULL, _IOFBF, 1 << 20);
	w->written = 0;
	w->cur = 0;
	w->done = 0;

	if (out(w, "GGUF", 4, cause) != 0)
		return (-1);
	u32 = 3;
	if (out(w, &u32, 4, cause) != 0 ||
	    out(w, &w->n_t, 8, cause) != 0 ||
	    out(w, &w->n_kv, 8, cause) != 0 ||
	    out(w, w->kv, w->kv_len, cause) != 0)
		return (-1);
	for (i = 0; i < w->n_t; i++) {
		t = &w->t[i];
		u64 = strlen(t->name);
		if (out(w, &u64, 8, cause) != 0 ||
		    out(w, t->name, u64, cause) != 0 ||
		    out(w, &t->n_dims, 4, cause) != 0)
			return (-1);
		for (d = 0; d < t->n_dims; d++) {
			if (out(w, &t->ne[d], 8, cause) != 0)
				return (-1);
		}
		if (out(w, &t->type, 4, cause) != 0 ||
		    out(w, &t->offset, 8, cause) != 0)
			return (-1);
	}
	return (out_zeros(w, (w->alignment - w->written % w->alignment) %
	    w->alignment, cause));
}

/* Append the next bytes of tensor data, padding between tensors. */
int
gguf_writer_put(struct gguf_writer *w, const void *buf, size_t len,
    char **cause)
{
	const uint8_t	*p = buf;
	uint64_t	 n, end;

	if (w->f == NULL) {
		set_cause(cause, "gguf writer: put before open");
		return (-1);
	}
	while (len > 0) {
		if (w->cur >= w->n_t) {
			set_cause(cause, "%s: %zu bytes past the last tensor",
			    w->tmp, len);
			return (-1);
		}
		n = w->t[w->cur].nbytes - w->done;
		if (n > len)
			n = len;
		if (out(w, p, n, cause) != 0)
			return (-1);
		p += n;
		len -= n;
		w->done += n;
		if (w->done == w->t[w->cur].nbytes) {
			end = w->t[w->cur].offset + w->t[w->cur].nbytes;
			w->cur++;
			w->done = 0;
			if (w->cur < w->n_t &&
			    out_zeros(w, w->t[w->cur].offset - end, cause) != 0)
				return (-1);
		}
	}
	return (0);
}

/* Finish: every tensor must be complete; flush, sync and rename into place. */
int
gguf_writer_close(struct gguf_writer *w, uint64_t *size, char **cause)
{
	FILE	*f = w->f;

	if (f == NULL) {
		set_cause(cause, "gguf writer: close before open");
		return (-1);
	}
	if (w->cur < w->n_t) {
		set_cause(cause, "%s: tensor '%s' has %" PRIu64 " of %" PRIu64
		    " bytes", w->tmp, w->t[w->cur].name, w->done,
		    w->t[w->cur].nbytes);
		return (-1);
	}
	w->f = NULL;
	if (fflush(f) != 0 || fsync(fileno(f)) != 0) {
		set_cause(cause, "%s: %s", w->tmp, strerror(errno));
		fclose(f);
		unlink(w->tmp);
		return (-1);
	}
	if (fclose(f) != 0) {
		set_cause(cause, "%s: %s", w->tmp, strerror(errno));
		unlink(w->tmp);
		return (-1);
	}
	if (rename(w->tmp, w->path) != 0) {
		set_cause(cause, "rename %s: %s", w->tmp, strerror(errno));
		unlink(w->tmp);
		return (-1);
	}
	if (size != NULL)
		*size = w->written;
	return (0);
}

/* Write a whole file, filling tensors from their buffers or the callback. */
int
gguf_writer_write(struct gguf_writer *w, const char *path, gguf_fill_cb fill,
    void *arg, char **cause)
{
	uint64_t	i;

	if (gguf_writer_open(w, path, cause) != 0)
		return (-1);
	for (i = 0; i < w->n_t; i++) {
		if (w->t[i].data != NULL) {
			if (gguf_writer_put(w, w->t[i].data, w->t[i].nbytes,
			    cause) != 0)
				return (-1);
		} else if (fill == NULL) {
			set_cause(cause, "tensor '%s' has no data", w->t[i].name);
			return (-1);
		} else if (fill(arg, w, i, cause) != 0)
			return (-1);
		if (w->cur != i + 1) {
			set_cause(cause, "tensor '%s': %" PRIu64 " of %" PRIu64
			    " bytes written", w->t[i].name, w->done,
			    w->t[i].nbytes);
			return (-1);
		}
	}
	return (gguf_writer_close(w, NULL, cause));
}
