/* gguf_write.h: a streaming writer for GGUF v3 files. */
#ifndef PHASED_GGUF_WRITE_H
#define PHASED_GGUF_WRITE_H

#include <stddef.h>
#include <stdint.h>

#include "gguf.h"

/*
 * Use: create a writer, add the metadata and the tensor descriptions
 * (name, shape, type: the byte size follows from them), then either
 *
 *   gguf_writer_open(w, path) and gguf_writer_put() each tensor's bytes in
 *   the order the tensors were added (in as many pieces as convenient;
 *   padding between tensors is inserted here), then gguf_writer_close();
 *
 * or gguf_writer_write(w, path, fill, arg), which calls fill once per
 * tensor, in order, to put its bytes (or copies the buffer given to
 * gguf_writer_add_tensor_data).  Nothing but the metadata and the
 * descriptions is held in memory, so big models stream to disk.  The file
 * is written to PATH.tmp and renamed over PATH when complete.
 *
 * The add functions do not fail: a duplicate key or tensor name, a bad
 * shape or type, or a bad general.alignment is remembered and reported by
 * gguf_writer_open() or gguf_writer_write().
 */
struct gguf_writer;

typedef int (*gguf_fill_cb)(void *arg, struct gguf_writer *, uint64_t idx,
    char **cause);

struct gguf_writer *gguf_writer_new(void);
void	 gguf_writer_free(struct gguf_writer *);

void	 gguf_writer_add_u8(struct gguf_writer *, const char *, uint8_t);
void	 gguf_writer_add_i8(struct gguf_writer *, const char *, int8_t);
void	 gguf_writer_add_u16(struct gguf_writer *, const char *, uint16_t);
void	 gguf_writer_add_i16(struct gguf_writer *, const char *, int16_t);
/* general.alignment (a power of two, at most GGUF_MAX_ALIGNMENT) sets the alignment. */
void	 gguf_writer_add_u32(struct gguf_writer *, const char *, uint32_t);
void	 gguf_writer_add_i32(struct gguf_writer *, const char *, int32_t);
void	 gguf_writer_add_u64(struct gguf_writer *, const char *, uint64_t);
void	 gguf_writer_add_i64(struct gguf_writer *, const char *, int64_t);
void	 gguf_writer_add_f32(struct gguf_writer *, const char *, float);
void	 gguf_writer_add_f64(struct gguf_writer *, const char *, double);
void	 gguf_writer_add_bool(struct gguf_writer *, const char *, int);
void	 gguf_writer_add_str(struct gguf_writer *, const char *, const char *);
void	 gguf_writer_add_strn(struct gguf_writer *, const char *, const char *,
	    size_t);
/* An array of n scalar elements of type elem, copied from data (little-endian). */
void	 gguf_writer_add_arr(struct gguf_writer *, const char *,
	    enum gguf_vtype elem, const void *data, uint64_t n);
void	 gguf_writer_add_arr_str(struct gguf_writer *, const char *,
	    const char *const *strs, uint64_t n);
/* Copy a key and its value from an open file (e.g. the vocabulary). */
int	 gguf_writer_copy_kv(struct gguf_writer *, const struct gguf_kv *);

/* Describe a tensor; returns its index.  ne has n_dims entries. */
uint64_t gguf_writer_add_tensor(struct gguf_writer *, const char *name,
	    uint32_t n_dims, const uint64_t *ne, uint32_t type);
/* The same with its bytes, which must stay valid until written. */
uint64_t gguf_writer_add_tensor_data(struct gguf_writer *, const char *name,
	    uint32_t n_dims, const uint64_t *ne, uint32_t type, const void *data);

int	 gguf_writer_open(struct gguf_writer *, const char *path, char **cause);
int	 gguf_writer_put(struct gguf_writer *, const void *, size_t, char **cause);
/* Finish the file; fails if any tensor is short of data.  Returns bytes in *size. */
int	 gguf_writer_close(struct gguf_writer *, uint64_t *size, char **cause);
/* Open, fill each tensor (fill may be NULL when every tensor has data), close. */
int	 gguf_writer_write(struct gguf_writer *, const char *path,
	    gguf_fill_cb fill, void *arg, char **cause);

#endif
