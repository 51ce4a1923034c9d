/* rv_safetensors.h: read and write safetensors files (weights and outputs).
 *
 * Layout: 8-byte little-endian u64 N, N bytes of JSON header (an object mapping
 * each tensor name to {"dtype", "shape", "data_offsets": [begin, end]}, offsets
 * relative to the first byte after the header, plus an optional "__metadata__"
 * object of string -> string; the header may end in spaces), then the data.
 *
 * The reader treats every file as hostile: lengths, dtypes, shapes and offsets are
 * all checked (checked multiplication, every byte range inside the data section,
 * and the tensors that hold bytes tiling the data section exactly: no overlap, no
 * gap, no trailing bytes, as the format requires) before any tensor is handed
 * out, and every failure names the file and the tensor or problem. A successfully opened file is read-only and
 * may be shared between threads.
 *
 * Tensor data are little-endian and are NOT copied: rv_st_tensor.data points into
 * the file bytes held by the rv_safetensors. Because of that, data may be
 * unaligned for its dtype (files written elsewhere, or a writer whose tensors of
 * different element sizes were added small-first); memcpy out, or check
 * ((uintptr_t)data % rv_dtype_size(dtype)) before casting. */
#ifndef RV_SAFETENSORS_H
#define RV_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "rv_api.h"
#include "rv_status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RV_ST_MAX_DIMS 8
/* Largest header accepted (and written), as in the reference implementation. */
#define RV_ST_MAX_HEADER 100000000u

typedef enum rv_dtype {
    RV_F32 = 0,
    RV_F64,
    RV_F16,
    RV_BF16,
    RV_U8,
    RV_I8,
    RV_I16,
    RV_I32,
    RV_I64,
    RV_U16,
    RV_U32,
    RV_U64,
    RV_BOOL, /* one byte per element */
    RV_DTYPE_COUNT
} rv_dtype;

/* Bytes per element (0 for a value outside the enum). */
RV_API size_t rv_dtype_size(rv_dtype dtype);
/* The safetensors spelling ("F32", "BF16", ...; "?" for a value outside the enum). */
RV_API const char *rv_dtype_name(rv_dtype dtype);

typedef struct rv_st_tensor {
    const char *name;               /* never empty; owned by the rv_safetensors */
    rv_dtype dtype;
    int ndim;                       /* 0 (scalar) .. RV_ST_MAX_DIMS */
    int64_t shape[RV_ST_MAX_DIMS];  /* (ndim), row-major; entries past ndim are 0 */
    int64_t numel;                  /* product of shape (1 for a scalar, may be 0) */
    const void *data;               /* (nbytes) little-endian, into the file bytes */
    size_t nbytes;                  /* numel * rv_dtype_size(dtype) */
} rv_st_tensor;

/* An opened file: owns the file bytes (mmap'd read-only, or read into memory)
 * and the parsed header. */
typedef struct rv_safetensors rv_safetensors;

/* Opens and validates path. The file is mmap'd read-only (read into memory only
 * if mmap fails), so a multi-GB file costs no copy; it must not be truncated by
 * another process while open. */
RV_API rv_status rv_st_open(const char *path, rv_safetensors **out);

/* Validates len bytes already in memory. The bytes are COPIED: the caller's
 * buffer may be freed or changed as soon as this returns. label (e.g. a path or
 * "<memory>") names the buffer in error messages and is copied too. */
RV_API rv_status rv_st_parse(const void *bytes, size_t len, const char *label,
                             rv_safetensors **out);

/* The path or label given at open time. */
RV_API const char *rv_st_label(const rv_safetensors *st);

/* Tensors are numbered 0 .. count-1 in the order of their data in the file
 * (ascending data_offsets; ties by name), which is the order they were added to
 * the writer for files this module wrote. rv_st_at returns NULL out of range. */
RV_API int rv_st_count(const rv_safetensors *st);
RV_API const rv_st_tensor *rv_st_at(const rv_safetensors *st, int i);

/* The tensor called name, or NULL if absent (O(log count)). */
RV_API const rv_st_tensor *rv_st_find(const rv_safetensors *st, const char *name);

/* Looks up name and checks it: dtype must equal dtype; ndim < 0 accepts any rank
 * and shape; otherwise the rank must equal ndim and, unless shape is NULL, each
 * shape[i] >= 0 must equal the file's (shape[i] < 0 accepts any extent). On
 * failure the message names the tensor, what was expected and what was found. */
RV_API rv_status rv_st_get(const rv_safetensors *st, const char *name, rv_dtype dtype,
                           int ndim, const int64_t *shape, const rv_st_tensor **out);

/* The "__metadata__" value for key, or NULL if absent. */
RV_API const char *rv_st_meta(const rv_safetensors *st, const char *key);

/* Releases everything (unmaps the file); every pointer handed out dies with it.
 * Sets *st to NULL; NULL or *st == NULL is a no-op. */
RV_API void rv_st_free(rv_safetensors **st);

/* A writer: collects tensors (borrowed) and metadata, then writes one file. */
typedef struct rv_st_writer rv_st_writer;

RV_API rv_status rv_st_writer_new(rv_st_writer **out);

/* Adds a tensor. name must be non-empty valid UTF-8, not "__metadata__" and not
 * already added. data (numel * rv_dtype_size(dtype) bytes, little-endian; may be
 * NULL when that is 0) is borrowed until rv_st_writer_write returns. The name
 * and shape are copied. */
RV_API rv_status rv_st_writer_add(rv_st_writer *w, const char *name, rv_dtype dtype, int ndim,
                                  const int64_t *shape, const void *data);

/* Sets a "__metadata__" entry (both strings valid UTF-8, copied); setting a key
 * again replaces its value. */
RV_API rv_status rv_st_writer_meta(rv_st_writer *w, const char *key, const char *value);

/* Writes the file: header JSON (compact, keys sorted) padded with spaces so the
 * data start 8-byte aligned, then the tensors back to back in the order they
 * were added. Writes "<path>.tmp.<pid>", fsyncs it and rename(2)s it onto path,
 * so readers see the old file or the new one, never a partial one. On any
 * failure the temporary file is removed and a file already at path is left as it
 * was. The writer may be written again (e.g. to another path). */
RV_API rv_status rv_st_writer_write(rv_st_writer *w, const char *path);

/* The same bytes written to the open descriptor fd (a pipe, standard output),
 * in one pass and in place: no temporary file, no fsync, fd left open. A
 * failed write (EPIPE when the reader went away, with SIGPIPE ignored) is
 * RV_ERR_IO naming label, and the bytes already written stay written. */
RV_API rv_status rv_st_writer_write_fd(rv_st_writer *w, int fd, const char *label);

/* Sets *w to NULL; NULL or *w == NULL is a no-op. */
RV_API void rv_st_writer_free(rv_st_writer **w);

#ifdef __cplusplus
}
#endif
#endif
