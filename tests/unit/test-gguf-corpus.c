/* test-gguf-corpus.c: hostile GGUF files, generated in memory, must fail cleanly. */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "gguf.h"
#include "gguf_write.h"
#include "quantize.h"
#include "tensor_type.h"
#include "util.h"
#include "tap.h"
#include "ggufraw.h"
#include "testdata.h"

/* A growing byte buffer to assemble files in. */
/* Append a kv holding a string. */
static void
kv_str(struct rawbuf *b, const char *key, const char *val)
{
	raw_str(b, key);
	raw_u32(b, GGUF_VT_STRING);
	raw_str(b, val);
}

/* Append a kv holding a uint32. */
static void
kv_u32(struct rawbuf *b, const char *key, uint32_t v)
{
	raw_str(b, key);
	raw_u32(b, GGUF_VT_UINT32);
	raw_u32(b, v);
}

/* One tensor of the test file. */
struct tdesc {
	const char	*name;
	uint32_t	 n_dims;
	uint64_t	 ne[5];
	uint32_t	 type;
	uint64_t	 offset;
};

/*
 * How to build a file.  The defaults give a valid one; each case changes
 * one field.  extra_kv appends further entries (n_extra of them) after the
 * standard ones, so a case can put a broken entry in the metadata.
 */
struct fspec {
	const char	*magic;
	uint32_t	 version;
	int		 set_counts;	/* use n_tensors/n_kv below verbatim */
	uint64_t	 n_tensors;
	uint64_t	 n_kv;
	int		 alignment_key;	/* write general.alignment */
	uint32_t	 alignment;
	uint32_t	 alignment_type;
	void		(*extra_kv)(struct rawbuf *);
	int		 n_extra;
	int		 nt;
	struct tdesc	 t[4];
	int64_t		 data_delta;	/* bytes added to (or cut from) the data */
	int		 no_pad;	/* leave out padding before the data */
};

/* The valid default: three tensors of different types, some metadata. */
static void
spec_default(struct fspec *s)
{
	memset(s, 0, sizeof *s);
	s->magic = "GGUF";
	s->version = 3;
	s->alignment_key = 1;
	s->alignment = 32;
	s->alignment_type = GGUF_VT_UINT32;
	s->nt = 3;
	s->t[0] = (struct tdesc){ "a", 2, { 8, 2 }, TT_F32, 0 };	/* 64 bytes */
	s->t[1] = (struct tdesc){ "b", 2, { 32, 2 }, TT_Q4_0, 64 };	/* 36 bytes */
	s->t[2] = (struct tdesc){ "c", 1, { 4 }, TT_F16, 128 };	/* 8 bytes */
}

/* Bytes a tensor needs, or 0 when the description is not valid. */
static uint64_t
tdesc_bytes(const struct tdesc *t)
{
	const struct tensor_type_info	*ti;
	uint64_t			 n = 1;
	uint32_t			 d;

	if ((ti = tensor_type_get(t->type)) == NULL || t->n_dims > 4)
		return (0);
	for (d = 0; d < t->n_dims; d++) {
		if (__builtin_mul_overflow(n, t->ne[d], &n))
			return (0);
	}
	if (n % ti->block_elems != 0 || n > (1ULL << 32))
		return (0);
	return (n / ti->block_elems * ti->block_bytes);
}

/* Assemble the file a spec describes. */
static void
build(const struct fspec *s, struct rawbuf *b)
{
	uint64_t	data = 0, end;
	uint32_t	d;
	int		i, n_kv;

	memset(b, 0, sizeof *b);
	raw_put(b, s->magic, 4);
	raw_u32(b, s->version);
	n_kv = 3 + (s->alignment_key ? 1 : 0) + s->n_extra;
	raw_u64(b, s->set_counts ? s->n_tensors : (uint64_t)s->nt);
	raw_u64(b, s->set_counts ? s->n_kv : (uint64_t)n_kv);

	kv_str(b, "general.architecture", "llama");
	if (s->alignment_key) {
		raw_str(b, "general.alignment");
		raw_u32(b, s->alignment_type);
		if (s->alignment_type == GGUF_VT_UINT64)
			raw_u64(b, s->alignment);
		else
			raw_u32(b, s->alignment);
	}
	/* An int32 array and a string array. */
	raw_str(b, "test.ints");
	raw_u32(b, GGUF_VT_ARRAY);
	raw_u32(b, GGUF_VT_INT32);
	raw_u64(b, 3);
	raw_u32(b, 1);
	raw_u32(b, (uint32_t)-2);
	raw_u32(b, 3);
	raw_str(b, "test.strs");
	raw_u32(b, GGUF_VT_ARRAY);
	raw_u32(b, GGUF_VT_STRING);
	raw_u64(b, 2);
	raw_str(b, "x");
	raw_str(b, "yz");
	if (s->extra_kv != NULL)
		s->extra_kv(b);

	for (i = 0; i < s->nt; i++) {
		raw_str(b, s->t[i].name);
		raw_u32(b, s->t[i].n_dims);
		for (d = 0; d < s->t[i].n_dims && d < 5; d++)
			raw_u64(b, s->t[i].ne[d]);
		raw_u32(b, s->t[i].type);
		raw_u64(b, s->t[i].offset);
		end = s->t[i].offset + tdesc_bytes(&s->t[i]);
		if (end > data && end < (1ULL << 32))
			data = end;
	}
	if (!s->no_pad) {
		while (b->len % 32 != 0)
			raw_u8(b, 0);
	}
	data += s->data_delta;
	for (end = 0; end < data; end++)
		raw_u8(b, (uint8_t)(end * 7));
}

/*
 * Parse a copy of exactly len bytes (so the sanitizer sees any read past
 * the end) and return the result; *cause gets the error.
 */
static struct gguf_file *
parse_copy(const uint8_t *p, size_t len, char **cause)
{
	struct gguf_file	*gf;
	uint8_t			*copy;

	copy = xmalloc(len);
	memcpy(copy, p, len);
	*cause = NULL;
	gf = gguf_open_mem(copy, len, cause);
	if (gf != NULL) {
		/* The result points into the buffer; keep it with the file. */
		gguf_close(gf);
		gf = gguf_open_mem(p, len, cause);
	}
	free(copy);
	return (gf);
}

/* Build a spec and check it fails with a message containing want. */
static void
expect_fail(const char *name, const struct fspec *s, const char *want)
{
	struct gguf_file	*gf;
	struct rawbuf		 b;
	char			*cause = NULL;

	build(s, &b);
	gf = parse_copy(b.p, b.len, &cause);
	ok(gf == NULL, "%s: rejected", name);
	like(cause, want, "%s: error names the fault", name);
	gguf_close(gf);
	free(cause);
	free(b.p);
}

/* Build a spec and check it parses. */
static void
expect_ok(const char *name, const struct fspec *s)
{
	struct gguf_file	*gf;
	struct rawbuf		 b;
	char			*cause = NULL;

	build(s, &b);
	gf = parse_copy(b.p, b.len, &cause);
	if (!ok(gf != NULL, "%s: accepted", name))
		diag("%s", cause);
	gguf_close(gf);
	free(cause);
	free(b.p);
}

/* A string value whose length runs past the end of the file. */
static void
extra_str_past_eof(struct rawbuf *b)
{
	raw_str(b, "test.bad");
	raw_u32(b, GGUF_VT_STRING);
	raw_u64(b, 1ULL << 40);
	raw_put(b, "abc", 3);
}

/* A string value of length 2^64-1. */
static void
extra_str_overflow(struct rawbuf *b)
{
	raw_str(b, "test.bad");
	raw_u32(b, GGUF_VT_STRING);
	raw_u64(b, UINT64_MAX);
	raw_put(b, "abc", 3);
}

/* An int32 array longer than the file. */
static void
extra_arr_past_eof(struct rawbuf *b)
{
	raw_str(b, "test.bad");
	raw_u32(b, GGUF_VT_ARRAY);
	raw_u32(b, GGUF_VT_INT32);
	raw_u64(b, 1ULL << 40);
	raw_u32(b, 1);
}

/* An int32 array whose byte size overflows 64 bits. */
static void
extra_arr_overflow(struct rawbuf *b)
{
	raw_str(b, "test.bad");
	raw_u32(b, GGUF_VT_ARRAY);
	raw_u32(b, GGUF_VT_INT32);
	raw_u64(b, 1ULL << 62);
	raw_u32(b, 1);
}

/* A string array with more entries than the file can hold. */
static void
extra_strarr_past_eof(struct rawbuf *b)
{
	raw_str(b, "test.bad");
	raw_u32(b, GGUF_VT_ARRAY);
	raw_u32(b, GGUF_VT_STRING);
	raw_u64(b, 1ULL << 61);
	raw_str(b, "x");
}

/* A string array whose second entry runs past the end. */
static void
extra_strarr_elem_past_eof(struct rawbuf *b)
{
	raw_str(b, "test.bad");
	raw_u32(b, GGUF_VT_ARRAY);
	raw_u32(b, GGUF_VT_STRING);
	raw_u64(b, 2);
	raw_str(b, "x");
	raw_u64(b, 1ULL << 50);
}

/* An array of arrays. */
static void
extra_nested(struct rawbuf *b)
{
	raw_str(b, "test.bad");
	raw_u32(b, GGUF_VT_ARRAY);
	raw_u32(b, GGUF_VT_ARRAY);
	raw_u64(b, 1);
	raw_u32(b, GGUF_VT_INT32);
	raw_u64(b, 1);
	raw_u32(b, 7);
}

/* An array of an undefined element type. */
static void
extra_arr_elem_type(struct rawbuf *b)
{
	raw_str(b, "test.bad");
	raw_u32(b, GGUF_VT_ARRAY);
	raw_u32(b, 13);
	raw_u64(b, 1);
	raw_u32(b, 7);
}

/* An entry with an empty key. */
static void
extra_empty_key(struct rawbuf *b)
{
	raw_u64(b, 0);
	raw_u32(b, GGUF_VT_UINT32);
	raw_u32(b, 1);
}

/* A key with a NUL byte inside. */
static void
extra_nul_key(struct rawbuf *b)
{
	raw_u64(b, 3);
	raw_put(b, "a\0b", 3);
	raw_u32(b, GGUF_VT_UINT32);
	raw_u32(b, 1);
}

/* A key one byte longer than the limit. */
static void
extra_long_key(struct rawbuf *b)
{
	char	*k = xmalloc(GGUF_MAX_KEY_LEN + 2);

	memset(k, 'k', GGUF_MAX_KEY_LEN + 1);
	k[GGUF_MAX_KEY_LEN + 1] = '\0';
	kv_u32(b, k, 1);
	free(k);
}

/* A second general.architecture. */
static void
extra_dup_key(struct rawbuf *b)
{
	kv_str(b, "general.architecture", "gpt2");
}

/* An undefined value type. */
static void
extra_bad_vtype(struct rawbuf *b)
{
	raw_str(b, "test.bad");
	raw_u32(b, 13);
	raw_u32(b, 1);
}

/* A bool that is neither 0 nor 1. */
static void
extra_bad_bool(struct rawbuf *b)
{
	raw_str(b, "test.bad");
	raw_u32(b, GGUF_VT_BOOL);
	raw_u8(b, 2);
}

/* Typed values for the getter checks. */
static void
extra_typed(struct rawbuf *b)
{
	raw_str(b, "t.neg");
	raw_u32(b, GGUF_VT_INT32);
	raw_u32(b, (uint32_t)-5);
	raw_str(b, "t.big");
	raw_u32(b, GGUF_VT_UINT64);
	raw_u64(b, 1ULL << 33);
	raw_str(b, "t.i8");
	raw_u32(b, GGUF_VT_INT8);
	raw_u8(b, 100);
	raw_str(b, "t.f64");
	raw_u32(b, GGUF_VT_FLOAT64);
	{ double v = 0.25; raw_put(b, &v, 8); }
	raw_str(b, "t.f64big");
	raw_u32(b, GGUF_VT_FLOAT64);
	{ double v = 1e300; raw_put(b, &v, 8); }
	raw_str(b, "t.true");
	raw_u32(b, GGUF_VT_BOOL);
	raw_u8(b, 1);
	raw_str(b, "t.nulstr");
	raw_u32(b, GGUF_VT_STRING);
	raw_u64(b, 3);
	raw_put(b, "a\0b", 3);
}

/* Every field class, each broken once. */
static void
test_cases(void)
{
	struct fspec	s;
	char		longname[GGUF_MAX_NAME_LEN + 2];

	spec_default(&s);
	expect_ok("default", &s);
	s.version = 2;
	expect_ok("version 2", &s);

	spec_default(&s);
	s.magic = "GGUG";
	expect_fail("bad magic", &s, "bad magic 47 47 55 47");
	spec_default(&s);
	s.version = 1;
	expect_fail("version 1", &s, "unsupported gguf version 1 (need 2 or 3)");
	s.version = 4;
	expect_fail("version 4", &s, "unsupported gguf version 4");
	s.version = 3U << 24;
	expect_fail("big-endian version", &s, "big-endian file?");

	spec_default(&s);
	s.set_counts = 1;
	s.n_tensors = 1ULL << 40;
	s.n_kv = 4;
	expect_fail("huge tensor count", &s,
	    "tensor count 1099511627776 exceeds what a");
	s.n_tensors = 3;
	s.n_kv = 1ULL << 60;
	expect_fail("huge kv count", &s,
	    "kv count 1152921504606846976 exceeds what a");
	s.n_kv = UINT64_MAX;
	expect_fail("kv count 2^64-1", &s, "kv count 18446744073709551615");
	s.n_kv = 5;
	expect_fail("kv count one too many", &s, "tensor 0");
	s.n_kv = 4;
	s.n_tensors = 10;
	expect_fail("tensor count past the infos", &s, "exceeds what the");

	spec_default(&s);
	s.n_extra = 1;
	s.extra_kv = extra_str_past_eof;
	expect_fail("string length past EOF", &s,
	    "key 'test.bad': string length 1099511627776 past end of file");
	s.extra_kv = extra_str_overflow;
	expect_fail("string length 2^64-1", &s,
	    "key 'test.bad': string length 18446744073709551615 past end of file");
	s.extra_kv = extra_arr_past_eof;
	expect_fail("array length past EOF", &s,
	    "key 'test.bad': array length 1099511627776 of int32 past end of file");
	s.extra_kv = extra_arr_overflow;
	expect_fail("array length overflow", &s,
	    "key 'test.bad': array length 4611686018427387904 of int32 overflows");
	s.extra_kv = extra_strarr_past_eof;
	expect_fail("string array length past EOF", &s,
	    "key 'test.bad': array length 2305843009213693952 past end of file");
	s.extra_kv = extra_strarr_elem_past_eof;
	expect_fail("string array element past EOF", &s,
	    "key 'test.bad': array string length 1125899906842624 past end");
	s.extra_kv = extra_nested;
	expect_fail("array of arrays", &s,
	    "key 'test.bad': nested arrays are not supported");
	s.extra_kv = extra_arr_elem_type;
	expect_fail("array element type 13", &s,
	    "key 'test.bad': array element type 13 out of range (max 12)");
	s.extra_kv = extra_empty_key;
	expect_fail("empty key", &s, "kv 4: empty key");
	s.extra_kv = extra_nul_key;
	expect_fail("NUL in key", &s, "kv 4: key contains a NUL byte");
	s.extra_kv = extra_long_key;
	expect_fail("key too long", &s, "kv 4: key length 65536 exceeds maximum 65535");
	s.extra_kv = extra_dup_key;
	expect_fail("duplicate key", &s, "duplicate key 'general.architecture'");
	s.extra_kv = extra_bad_vtype;
	expect_fail("value type 13", &s,
	    "key 'test.bad': value type 13 out of range (max 12)");
	s.extra_kv = extra_bad_bool;
	expect_fail("bool 2", &s, "key 'test.bad': bool value 2 is not 0 or 1");

	spec_default(&s);
	s.t[0].name = "";
	expect_fail("empty tensor name", &s, "tensor 0: empty name");
	memset(longname, 'n', sizeof longname - 1);
	longname[sizeof longname - 1] = '\0';
	s.t[0].name = longname;
	expect_fail("tensor name too long", &s, "tensor 0: name length 256 exceeds maximum 255");
	spec_default(&s);
	s.t[2].name = "a";
	expect_fail("duplicate tensor name", &s, "duplicate tensor name 'a'");

	spec_default(&s);
	s.t[0].n_dims = 5;
	s.t[0].ne[2] = s.t[0].ne[3] = s.t[0].ne[4] = 1;
	expect_fail("n_dims 5", &s, "tensor 'a': n_dims 5 out of range 1..4");
	s.t[0].n_dims = 0;
	expect_fail("n_dims 0", &s, "tensor 'a': n_dims 0 out of range 1..4");
	spec_default(&s);
	s.t[0].ne[1] = 0;
	expect_fail("dimension 0", &s, "tensor 'a': dimension 1 is 0");
	s.t[0].ne[1] = (1ULL << 63) + 2;
	expect_fail("negative dimension", &s,
	    "tensor 'a': dimension 1 is negative (-9223372036854775806)");
	s.t[0].ne[1] = (1ULL << 40) + 1;
	expect_fail("dimension above maximum", &s,
	    "tensor 'a': dimension 1 is 1099511627777, above maximum 1099511627776");
	s.t[0].n_dims = 3;
	s.t[0].ne[0] = 1ULL << 40;
	s.t[0].ne[1] = 1ULL << 40;
	s.t[0].ne[2] = 1;
	expect_fail("element count overflow", &s, "tensor 'a': element count overflows");
	s.t[0].n_dims = 2;
	s.t[0].ne[0] = 1ULL << 40;
	s.t[0].ne[1] = 1ULL << 23;
	expect_fail("byte size overflow", &s,
	    "tensor 'a': byte size overflows (9223372036854775808 elements of F32)");

	spec_default(&s);
	s.t[0].type = 99;
	expect_fail("type 99", &s, "tensor 'a': type 99 is not a GGUF tensor type");
	s.t[0].type = 4;
	expect_fail("type 4 (removed from GGUF)", &s, "tensor 'a': type 4 is not a GGUF tensor type");
	s.t[0].type = 17;
	s.t[0].ne[0] = 256;
	expect_fail("IQ2_XS", &s, "unsupported tensor type IQ2_XS for tensor 'a'");
	spec_default(&s);
	s.t[1].ne[0] = 33;
	expect_fail("Q4_0 ne0 33", &s,
	    "tensor 'b': first dimension 33 is not a multiple of the Q4_0 block size 32");

	spec_default(&s);
	s.alignment = 0;
	expect_fail("alignment 0", &s, "general.alignment 0 is not a nonzero power of two");
	s.alignment = 3;
	expect_fail("alignment 3", &s, "general.alignment 3 is not a nonzero power of two");
	s.alignment = 1U << 31;
	expect_fail("alignment 2^31", &s,
	    "general.alignment 2147483648 exceeds maximum 1048576");
	s.alignment = 32;
	s.alignment_type = GGUF_VT_UINT64;
	expect_fail("alignment as uint64", &s, "general.alignment has type uint64, want uint32");
	spec_default(&s);
	s.alignment = 256;
	expect_fail("alignment 256 with offsets 32-aligned", &s,
	    "tensor 'b': offset 64 is not a multiple of the alignment 256");
	s.alignment = 16;
	expect_fail("alignment 16 with gaps of 32", &s,
	    "tensor 'b' (Q4_0, 36 bytes) is followed by 28 unused bytes "
	    "before 'c' (alignment 16): its type or shape does not match "
	    "its data");
	spec_default(&s);
	s.alignment_key = 0;
	expect_ok("default alignment", &s);

	spec_default(&s);
	s.t[1].offset = 68;
	expect_fail("misaligned offset", &s,
	    "tensor 'b': offset 68 is not a multiple of the alignment 32");
	s.t[1].offset = 32;
	expect_fail("overlapping tensors", &s,
	    "tensors 'a' and 'b' overlap ('a' ends at 64, 'b' starts at 32)");
	spec_default(&s);
	s.t[0].offset = 128;
	s.t[2].offset = 0;
	expect_fail("offsets out of order, with a gap", &s,
	    "tensor 'c' (F16, 8 bytes) is followed by 56 unused bytes before "
	    "'b' (alignment 32): its type or shape does not match its data");
	s.t[1].offset = 0;
	s.t[2].offset = 128;
	s.t[0].offset = 32;
	expect_fail("out of order and overlapping", &s,
	    "tensors 'b' and 'a' overlap ('b' ends at 36, 'a' starts at 32)");
	spec_default(&s);
	s.t[2].offset = 4096;
	s.data_delta = -(4104 - 136);
	expect_fail("offset past end", &s,
	    "tensor 'c': offset 4096 past end of file (data section has 136 bytes)");
	spec_default(&s);
	s.data_delta = -1;
	expect_fail("data one byte short", &s,
	    "tensor 'c': data of 8 bytes at offset 128 runs 1 bytes past end of file");
	s.data_delta = -136;
	s.no_pad = 1;
	expect_fail("no data section", &s, "data section start");
}

/* Counts the file could hold but that exceed the fixed caps. */
static void
test_caps(void)
{
	struct gguf_file	*gf;
	uint8_t			*p;
	size_t			 len = 24 + ((size_t)GGUF_MAX_KV + 1) * 33;
	uint64_t		 n;
	uint32_t		 v = 3;
	char			*cause = NULL;

	p = xcalloc(1, len);
	memcpy(p, "GGUF", 4);
	memcpy(p + 4, &v, 4);
	n = GGUF_MAX_TENSORS + 1;
	memcpy(p + 8, &n, 8);
	gf = gguf_open_mem(p, len, &cause);
	ok(gf == NULL, "tensor count above the cap");
	like(cause, "tensor count 1048577 exceeds maximum 1048576", "cap named");
	free(cause);
	n = 0;
	memcpy(p + 8, &n, 8);
	n = GGUF_MAX_KV + 1;
	memcpy(p + 16, &n, 8);
	gf = gguf_open_mem(p, len, &cause);
	ok(gf == NULL, "kv count above the cap");
	like(cause, "kv count 1048577 exceeds maximum 1048576", "cap named");
	free(cause);
	free(p);
}

/* Getters on a valid file with values of many types. */
static void
test_getters(void)
{
	struct fspec		 s;
	struct rawbuf		 b;
	struct gguf_file	*gf;
	const struct gguf_kv	*kv;
	char			*cause = NULL, *str;
	uint32_t		 u32;
	uint64_t		 u64;
	float			 f;
	int			 bv;

	spec_default(&s);
	s.n_extra = 7;
	s.extra_kv = extra_typed;
	build(&s, &b);
	gf = gguf_open_mem(b.p, b.len, &cause);
	if (!ok(gf != NULL, "typed file parses")) {
		diag("%s", cause);
		free(cause);
		free(b.p);
		return;
	}
	ok(gguf_get_u32(gf, "t.neg", &u32, &cause) != 0, "negative as u32");
	like(cause, "key 't.neg': value -5 out of range 0..4294967295", "negative named");
	free(cause);
	ok(gguf_get_u32(gf, "t.big", &u32, &cause) != 0, "2^33 as u32");
	like(cause, "key 't.big': value 8589934592 out of range", "too big named");
	free(cause);
	ok(gguf_get_u64(gf, "t.big", &u64, &cause) == 0 && u64 == 1ULL << 33, "2^33 as u64");
	ok(gguf_get_u32(gf, "t.i8", &u32, &cause) == 0 && u32 == 100, "int8 100 as u32");
	f = 0;
	ok(gguf_get_f32(gf, "t.f64", &f, &cause) == 0, "f64 as f32");
	near(f, 0.25, 0, "f64 value");
	ok(gguf_get_f32(gf, "t.f64big", &f, &cause) != 0, "1e300 as f32");
	like(cause, "out of float range", "float range named");
	free(cause);
	ok(gguf_get_f32(gf, "t.i8", &f, &cause) != 0, "int8 as f32");
	like(cause, "key 't.i8' has type int8, want a float", "float type named");
	free(cause);
	ok(gguf_get_bool(gf, "t.true", &bv, &cause) == 0 && bv == 1, "bool");
	ok(gguf_get_bool(gf, "t.i8", &bv, &cause) != 0, "int8 as bool");
	free(cause);
	str = gguf_get_str(gf, "t.nulstr", &cause);
	ok(str == NULL, "string with NUL");
	like(cause, "key 't.nulstr': string contains a NUL byte", "NUL named");
	free(cause);
	str = gguf_get_str(gf, "general.architecture", &cause);
	is_str(str, "llama", "string value");
	free(str);

	kv = gguf_get_arr(gf, "test.ints", GGUF_VT_INT32, &cause);
	ok(kv != NULL && kv->v.arr.n == 3, "int32 array");
	if (kv != NULL)
		ok(gguf_arr_i32(kv, 0) == 1 && gguf_arr_i32(kv, 1) == -2 &&
		    gguf_arr_i32(kv, 2) == 3, "int32 array values");
	kv = gguf_get_arr(gf, "test.ints", GGUF_VT_FLOAT32, &cause);
	ok(kv == NULL, "int32 array asked as float32");
	like(cause, "key 'test.ints' is an array of int32, want an array of float32",
	    "element type named");
	free(cause);
	kv = gguf_get_arr(gf, "general.architecture", GGUF_VT_STRING, &cause);
	ok(kv == NULL, "string asked as array");
	like(cause, "key 'general.architecture' has type string, want an array of string",
	    "array type named");
	free(cause);
	kv = gguf_get_arr(gf, "test.strs", GGUF_VT_STRING, &cause);
	ok(kv != NULL && kv->v.arr.n == 2 && kv->v.arr.strs[1].len == 2 &&
	    memcmp(kv->v.arr.strs[1].ptr, "yz", 2) == 0, "string array");
	ok(gguf_find_tensor(gf, "b") != NULL &&
	    gguf_find_tensor(gf, "b")->nbytes == 36, "tensor b is 36 bytes");
	ok(gguf_find_tensor(gf, "nope") == NULL, "no such tensor");
	gguf_close(gf);
	free(b.p);
}

/* Every proper prefix of a valid file must fail cleanly. */
static void
test_truncation(void)
{
	struct fspec		 s;
	struct rawbuf		 b;
	struct gguf_file	*gf;
	char			*cause;
	size_t			 len, bad = 0, nocause = 0;

	spec_default(&s);
	build(&s, &b);
	for (len = 0; len < b.len; len++) {
		gf = parse_copy(b.p, len, &cause);
		if (gf != NULL) {
			if (bad++ == 0)
				diag("prefix of %zu bytes accepted", len);
			gguf_close(gf);
		}
		if (cause == NULL || *cause == '\0')
			nocause++;
		if (len == 3 || len == 30 || len == b.len - 1)
			diag("prefix %zu: %s", len, cause ? cause : "(none)");
		free(cause);
	}
	ok(bad == 0, "all %zu prefixes rejected", b.len);
	ok(nocause == 0, "every rejection has a cause");
	free(b.p);
}

/* Random single-byte corruption: parse must never crash or leak. */
static void
test_flips(void)
{
	struct fspec		 s;
	struct rawbuf		 b;
	struct gguf_file	*gf;
	char			*cause;
	uint64_t		 x = 0x9e3779b97f4a7c15ULL;
	int			 i, accepted = 0;
	size_t			 pos;
	uint8_t			 old;

	spec_default(&s);
	build(&s, &b);
	for (i = 0; i < 20000; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		pos = (x >> 8) % b.len;
		old = b.p[pos];
		b.p[pos] ^= (uint8_t)(1 + (x & 0xfe));
		if ((x >> 40) % 3 == 0)
			b.p[pos] = 0xff;
		gf = parse_copy(b.p, b.len, &cause);
		if (gf != NULL)
			accepted++;
		gguf_close(gf);
		free(cause);
		b.p[pos] = old;
	}
	ok(1, "20000 corrupted files parsed without crashing (%d accepted)",
	    accepted);
	free(b.p);
}

/* Fill callback: a Q4_K tensor quantized from a ramp. */
static int
fill_q4k(void *arg, struct gguf_writer *w, uint64_t idx, char **cause)
{
	float	x[512];
	uint8_t	q[2 * 144];
	int	i;

	(void)arg;
	for (i = 0; i < 512; i++)
		x[i] = (i - 256) / 1024.0f;
	if (quantize_row(TT_Q4_K, x, q, 512) != sizeof q)
		return (-1);
	/* In two pieces, to exercise partial puts. */
	if (gguf_writer_put(w, q, 100, cause) != 0)
		return (-1);
	return (gguf_writer_put(w, q + 100, sizeof q - 100, cause));
}

/* Write a file with every kind of value, read it back, compare. */
static void
test_writer_roundtrip(void)
{
	struct gguf_writer	*w;
	struct gguf_file	*gf;
	const struct gguf_kv	*kv;
	const struct gguf_tensor *t;
	const char		*strs[3] = { "alpha", "", "gamma" };
	uint8_t			 u8s[5] = { 1, 2, 3, 250, 0 };
	int32_t			 i32s[3] = { -1, 0, 70000 };
	float			 f32s[2] = { 0.5f, -1e-3f }, data[24], f;
	uint8_t			 q8[34];
	uint64_t		 ne2[2] = { 8, 3 }, ne_q4k[2] = { 256, 2 };
	uint64_t		 ne1[1] = { 32 }, u64, i;
	char			 path[] = "/tmp/test-gguf-write.XXXXXX", *cause = NULL, *str;
	uint32_t		 u32;
	int			 fd, b;

	if ((fd = mkstemp(path)) == -1) {
		ok(0, "mkstemp");
		return;
	}
	close(fd);
	for (i = 0; i < 24; i++)
		data[i] = i * 0.25f - 2;
	memset(q8, 0x11, sizeof q8);

	w = gguf_writer_new();
	gguf_writer_add_u32(w, "general.alignment", 64);
	gguf_writer_add_str(w, "general.architecture", "llama");
	gguf_writer_add_u8(w, "t.u8", 200);
	gguf_writer_add_i8(w, "t.i8", -100);
	gguf_writer_add_u16(w, "t.u16", 60000);
	gguf_writer_add_i16(w, "t.i16", -30000);
	gguf_writer_add_u32(w, "t.u32", 4000000000U);
	gguf_writer_add_i32(w, "t.i32", -2000000000);
	gguf_writer_add_u64(w, "t.u64", 1ULL << 50);
	gguf_writer_add_i64(w, "t.i64", -(1LL << 50));
	gguf_writer_add_f32(w, "t.f32", 1.5f);
	gguf_writer_add_f64(w, "t.f64", -0.125);
	gguf_writer_add_bool(w, "t.bool", 1);
	gguf_writer_add_arr(w, "t.au8", GGUF_VT_UINT8, u8s, 5);
	gguf_writer_add_arr(w, "t.ai32", GGUF_VT_INT32, i32s, 3);
	gguf_writer_add_arr(w, "t.af32", GGUF_VT_FLOAT32, f32s, 2);
	gguf_writer_add_arr_str(w, "t.astr", strs, 3);
	gguf_writer_add_arr(w, "t.empty", GGUF_VT_INT32, NULL, 0);
	gguf_writer_add_tensor_data(w, "w.f32", 2, ne2, TT_F32, data);
	gguf_writer_add_tensor(w, "w.q4k", 2, ne_q4k, TT_Q4_K);
	gguf_writer_add_tensor_data(w, "w.q8", 1, ne1, TT_Q8_0, q8);
	if (!ok(gguf_writer_write(w, path, fill_q4k, NULL, &cause) == 0,
	    "writer wrote the file")) {
		diag("%s", cause);
		free(cause);
		gguf_writer_free(w);
		unlink(path);
		return;
	}
	gguf_writer_free(w);

	gf = gguf_open(path, &cause);
	if (!ok(gf != NULL, "written file opens")) {
		diag("%s", cause);
		free(cause);
		unlink(path);
		return;
	}
	ok(gf->version == 3 && gf->alignment == 64 && gf->data_offset % 64 == 0,
	    "v3, alignment 64, data aligned");
	ok(gguf_get_u32(gf, "t.u8", &u32, &cause) == 0 && u32 == 200, "u8");
	ok(gguf_find(gf, "t.i8")->type == GGUF_VT_INT8 &&
	    gguf_find(gf, "t.i8")->v.i == -100, "i8");
	ok(gguf_get_u32(gf, "t.u16", &u32, &cause) == 0 && u32 == 60000, "u16");
	ok(gguf_find(gf, "t.i16")->v.i == -30000, "i16");
	ok(gguf_get_u32(gf, "t.u32", &u32, &cause) == 0 && u32 == 4000000000U, "u32");
	ok(gguf_find(gf, "t.i32")->v.i == -2000000000, "i32");
	ok(gguf_get_u64(gf, "t.u64", &u64, &cause) == 0 && u64 == 1ULL << 50, "u64");
	ok(gguf_find(gf, "t.i64")->v.i == -(1LL << 50), "i64");
	ok(gguf_get_f32(gf, "t.f32", &f, &cause) == 0 && f == 1.5f, "f32");
	ok(gguf_get_f32(gf, "t.f64", &f, &cause) == 0 && f == -0.125f, "f64");
	ok(gguf_get_bool(gf, "t.bool", &b, &cause) == 0 && b == 1, "bool");
	str = gguf_get_str(gf, "general.architecture", &cause);
	is_str(str, "llama", "string");
	free(str);
	kv = gguf_get_arr(gf, "t.au8", GGUF_VT_UINT8, &cause);
	ok(kv != NULL && kv->v.arr.n == 5 &&
	    memcmp(kv->v.arr.data, u8s, 5) == 0, "u8 array");
	kv = gguf_get_arr(gf, "t.ai32", GGUF_VT_INT32, &cause);
	ok(kv != NULL && kv->v.arr.n == 3 && gguf_arr_i32(kv, 2) == 70000, "i32 array");
	kv = gguf_get_arr(gf, "t.af32", GGUF_VT_FLOAT32, &cause);
	ok(kv != NULL && kv->v.arr.n == 2 && gguf_arr_f32(kv, 1) == -1e-3f, "f32 array");
	kv = gguf_get_arr(gf, "t.astr", GGUF_VT_STRING, &cause);
	ok(kv != NULL && kv->v.arr.n == 3 && kv->v.arr.strs[1].len == 0 &&
	    kv->v.arr.strs[2].len == 5 &&
	    memcmp(kv->v.arr.strs[2].ptr, "gamma", 5) == 0, "string array");
	kv = gguf_get_arr(gf, "t.empty", GGUF_VT_INT32, &cause);
	ok(kv != NULL && kv->v.arr.n == 0, "empty array");

	t = gguf_find_tensor(gf, "w.f32");
	ok(t != NULL && t->type == TT_F32 && t->ne[0] == 8 && t->ne[1] == 3 &&
	    memcmp(t->data, data, sizeof data) == 0, "f32 tensor data");
	t = gguf_find_tensor(gf, "w.q4k");
	ok(t != NULL && t->type == TT_Q4_K && t->nbytes == 288 &&
	    t->offset % 64 == 0, "q4_k tensor placed");
	t = gguf_find_tensor(gf, "w.q8");
	ok(t != NULL && t->nbytes == 34 && memcmp(t->data, q8, 34) == 0 &&
	    t->offset % 64 == 0, "q8_0 tensor data");
	gguf_close(gf);
	unlink(path);
}

/* Copying every key and tensor of a real model reproduces it. */
static void
test_writer_copy(void)
{
	struct gguf_writer	*w;
	struct gguf_file	*src, *dst;
	const char		*sh;
	char			*in, *cause = NULL;
	char			 path[] = "/tmp/test-gguf-copy.XXXXXX";
	uint64_t		 i;
	int			 fd, same = 1;

	sh = shared_dir();
	xasprintf(&in, "%s/models/stories260K.gguf", sh);
	src = gguf_open(in, &cause);
	free(in);
	if (!ok(src != NULL, "open stories260K to copy")) {
		diag("%s", cause);
		free(cause);
		return;
	}
	if ((fd = mkstemp(path)) == -1) {
		gguf_close(src);
		return;
	}
	close(fd);
	w = gguf_writer_new();
	for (i = 0; i < src->n_kv; i++)
		gguf_writer_copy_kv(w, &src->kv[i]);
	for (i = 0; i < src->n_tensors; i++)
		gguf_writer_add_tensor_data(w, src->tensors[i].name,
		    src->tensors[i].n_dims, src->tensors[i].ne,
		    src->tensors[i].type, src->tensors[i].data);
	ok(gguf_writer_write(w, path, NULL, NULL, &cause) == 0, "copy written");
	gguf_writer_free(w);
	if ((dst = gguf_open(path, &cause)) == NULL) {
		ok(0, "copy opens: %s", cause);
		free(cause);
		gguf_close(src);
		unlink(path);
		return;
	}
	ok(dst->size == src->size && memcmp(dst->map, src->map, src->size) == 0,
	    "copy is byte for byte the original (%zu bytes)", dst->size);
	for (i = 0; i < src->n_kv && i < dst->n_kv; i++) {
		if (strcmp(src->kv[i].key, dst->kv[i].key) != 0 ||
		    src->kv[i].type != dst->kv[i].type)
			same = 0;
	}
	ok(same && src->n_kv == dst->n_kv, "same keys and types");
	gguf_close(dst);
	gguf_close(src);
	unlink(path);
}

/* The writer reports misuse instead of writing a bad file. */
static void
test_writer_errors(void)
{
	struct gguf_writer	*w;
	char			*cause = NULL;
	char			 path[] = "/tmp/test-gguf-werr.XXXXXX";
	uint64_t		 ne[2] = { 33, 1 }, ne2[1] = { 32 };
	uint8_t			 buf[64] = { 0 };
	int			 fd;

	if ((fd = mkstemp(path)) == -1)
		return;
	close(fd);
	w = gguf_writer_new();
	gguf_writer_add_u32(w, "a", 1);
	gguf_writer_add_u32(w, "a", 2);
	ok(gguf_writer_open(w, path, &cause) != 0, "duplicate key refused");
	like(cause, "duplicate key 'a'", "duplicate key named");
	free(cause);
	gguf_writer_free(w);

	w = gguf_writer_new();
	gguf_writer_add_tensor(w, "q", 2, ne, TT_Q4_0);
	ok(gguf_writer_open(w, path, &cause) != 0, "bad row size refused");
	like(cause, "tensor 'q': first dimension 33 is not a multiple of the "
	    "Q4_0 block size 32", "row size named");
	free(cause);
	gguf_writer_free(w);

	w = gguf_writer_new();
	gguf_writer_add_u32(w, "general.alignment", 48);
	ok(gguf_writer_open(w, path, &cause) != 0, "alignment 48 refused");
	like(cause, "general.alignment 48", "alignment named");
	free(cause);
	gguf_writer_free(w);

	w = gguf_writer_new();
	gguf_writer_add_tensor(w, "x", 1, ne2, TT_F16);
	ok(gguf_writer_open(w, path, &cause) == 0, "open");
	ok(gguf_writer_put(w, buf, 65, &cause) != 0, "put past the end refused");
	like(cause, "1 bytes past the last tensor", "overrun named");
	free(cause);
	gguf_writer_free(w);

	w = gguf_writer_new();
	gguf_writer_add_tensor(w, "x", 1, ne2, TT_F16);
	ok(gguf_writer_open(w, path, &cause) == 0, "open");
	ok(gguf_writer_put(w, buf, 10, &cause) == 0, "put 10 of 64");
	ok(gguf_writer_close(w, NULL, &cause) != 0, "close short refused");
	like(cause, "tensor 'x' has 10 of 64 bytes", "short tensor named");
	free(cause);
	gguf_writer_free(w);
	unlink(path);
}

/* Run every group of cases. */
int
main(void)
{
	test_cases();
	test_caps();
	test_getters();
	test_truncation();
	test_flips();
	test_writer_roundtrip();
	test_writer_copy();
	test_writer_errors();
	done_testing();
}
