/* st_convert.h: safetensors float formats to f32 and back (st_convert.c),
 * internal to the library. */
#ifndef RV_ST_CONVERT_H
#define RV_ST_CONVERT_H

#include <stdint.h>

#include "rv_safetensors.h"

/* t's numel elements (F32, F16 or BF16, little-endian in the file) as f32. */
void st_to_f32(const rv_st_tensor *t, float *out);
/* rows x cols floats as written: each row divided by its L2 norm in double (norm;
 * a zero row stays zero), then converted to dtype (RV_F32, or RV_F16 / RV_BF16
 * rounded to nearest even; NaN stays NaN) into dst (rows * cols elements). */
void st_rows_out(const float *x, int64_t rows, int64_t cols, int norm, rv_dtype dtype, void *dst);

#endif
