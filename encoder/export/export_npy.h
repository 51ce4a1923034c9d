/* export_npy.h (internal to encoder/export): the header of a NumPy .npy file,
 * version 1.0, of a C-order 2-d array of little-endian f32 or f16, as
 * numpy.lib.format writes it: the magic "\x93NUMPY", the version 1.0, the
 * header's length (u16 little-endian), then the dict
 * "{'descr': '<f4', 'fortran_order': False, 'shape': (N, D), }" padded with
 * spaces (room for the row count to grow to 21 digits, then to the alignment)
 * and ended by a newline so the data start at a multiple of 64 bytes: the bytes
 * numpy.save writes for the same array. */
#ifndef RV_EXPORT_NPY_H
#define RV_EXPORT_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "rv_safetensors.h"
#include "rv_status.h"

#define NPY_ALIGN 64
#define NPY_HEADER_MAX 256 /* a header of two 64-bit extents fits */

/* "<f4" for RV_F32, "<f2" for RV_F16; NULL for another dtype. */
const char *npy_descr(rv_dtype dtype);

/* The header of a (rows, cols) array of dtype into buf (cap bytes); returns its
 * length (a multiple of NPY_ALIGN), or 0 for a dtype without a descr, a negative
 * extent or a buf too small. */
size_t npy_header(rv_dtype dtype, int64_t rows, int64_t cols, char *buf, size_t cap);

/* Parses the header at the start of bytes (len of them: at least the header):
 * version 1.0, a descr npy_descr knows, C order, a 2-d shape. *dtype, *rows,
 * *cols and *header_len (where the data start) on success; RV_ERR_FORMAT naming
 * label and the problem otherwise. */
rv_status npy_parse(const void *bytes, size_t len, const char *label, rv_dtype *dtype,
                    int64_t *rows, int64_t *cols, size_t *header_len);

/* Checks the file at path is a .npy of dtype with cols columns whose size is
 * its header and its rows exactly: *rows and *header_len from it. RV_ERR_IO when
 * it cannot be read, RV_ERR_FORMAT naming path otherwise (a truncated file, another
 * dtype or width). */
rv_status npy_check_file(const char *path, rv_dtype dtype, int64_t cols, int64_t *rows,
                         size_t *header_len);

#endif
