/* embed_output.h: an output's tensors and metadata entries one by one, for the
 * in-process clients of the library (the flat layer turns them into named
 * arrays); the file is written from the same list (rv_embed_output_writer). */
#ifndef RV_EMBED_OUTPUT_H
#define RV_EMBED_OUTPUT_H

#include <stdint.h>

#include "rv_embed.h"

typedef struct embed_out_tensor {
    const char *name;
    rv_dtype dtype;
    int ndim;
    int64_t shape[2];
    const void *data;   /* (shape) elements of dtype; NULL when empty */
} embed_out_tensor;

typedef struct embed_out_meta {
    const char *key;
    char *value;        /* the text the file stores */
    int json;           /* 1: value is JSON (a number, a bool, an object); 0: plain text */
} embed_out_meta;

int embed_output_count(const rv_embed_output *o);
const embed_out_tensor *embed_output_tensor(const rv_embed_output *o, int i);
/* Tensor i's buffer, handed to the caller to free (NULL when the output does not
 * own it: then copy its data). An output a buffer was taken from is not written. */
void *embed_output_take(rv_embed_output *o, int i);
int embed_output_meta_count(const rv_embed_output *o);
const embed_out_meta *embed_output_meta(const rv_embed_output *o, int i);

#endif
