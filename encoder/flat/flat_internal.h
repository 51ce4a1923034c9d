/* flat_internal.h: what the flat calls (rv_flat.h) share inside the library:
 * building an rv_arrays, reading the JSON options with every key checked, and
 * the interrupt counter the long loops poll. */
#ifndef RV_FLAT_INTERNAL_H
#define RV_FLAT_INTERNAL_H

#include <jansson.h>
#include <stdint.h>

#include "rv_flat.h"
#include "rv_ingest.h"

#define FLAT_MAX_DIMS 4

/* ---- arrays (flat_arrays.c) ---- */

rv_status flat_arrays_new(rv_arrays **out);
/* Adds an array of ndim dims; data (may be NULL when empty) is copied. *dst
 * (may be NULL) receives the array's own buffer, for filling in place. */
rv_status flat_arrays_add(rv_arrays *a, const char *name, const char *dtype, int ndim,
                          const int64_t *dims, const void *data, void **dst);
/* Adds an array that takes over data (malloc'd; freed with the set). */
rv_status flat_arrays_adopt(rv_arrays *a, const char *name, const char *dtype, int ndim,
                            const int64_t *dims, void *data);
/* Adds a collected tensor (rv_ingest.h), taking over data (its malloc'd buffer,
 * or NULL when empty; freed on failure too). */
rv_status flat_arrays_adopt_collected(rv_arrays *a, const rv_collected *c, void *data);
/* Sets the metadata from obj (stolen reference; NULL: out of memory). */
rv_status flat_arrays_meta(rv_arrays *a, json_t *obj);
/* Private data kept with the set (freed with free_fn); rv_flat_tokens keeps the
 * token layout there for rv_flat_encoder_embed_tokens. */
void flat_arrays_attach(rv_arrays *a, void *priv, void (*free_fn)(void *));
void *flat_arrays_private(const rv_arrays *a);
/* The array called name with this dtype, or NULL. */
const void *flat_arrays_get(const rv_arrays *a, const char *name, const char *dtype,
                            int64_t *count);

/* ---- options (flat_opts.c) ---- */

/* Parses text (NULL or "": {}) and checks that every key is in allowed (a NULL-
 * terminated list); RV_ERR_INVALID naming the first key that is not. */
rv_status flat_opts_parse(const char *text, const char *const *allowed, json_t **out);
/* Each getter leaves *v alone when key is absent (or null) and returns
 * RV_ERR_INVALID naming the key when its value has the wrong type or range. */
rv_status flat_opt_bool(const json_t *o, const char *key, int *v);
rv_status flat_opt_int(const json_t *o, const char *key, int64_t lo, int64_t hi, int64_t *v);
rv_status flat_opt_num(const json_t *o, const char *key, double lo, double hi, double *v);
rv_status flat_opt_str(const json_t *o, const char *key, const char **v);
/* The ingest keys (FLAT_INGEST_KEYS): fps, size, start, duration, pad, video,
 * audio, video_stream, audio_stream, threads, max_corrupt, decode_all, into io
 * (start_s is left 0) and *start_at (NAN unless given); *size_set: "size" given. */
rv_status flat_opts_ingest(const json_t *o, rv_ingest_opts *io, double *start_at, int *size_set);
#define FLAT_INGEST_KEYS                                                                        \
    "fps", "size", "start", "duration", "pad", "video", "audio", "video_stream", "audio_stream", \
        "threads", "max_corrupt", "decode_all"

/* ---- model (flat_model.c) ---- */

struct rv_vit_model;
/* spec as --model: a preset (random weights from seed), a weights file or a folder. */
rv_status flat_model_open(const char *spec, uint64_t seed, struct rv_vit_model **out);

/* ---- tokens (flat_tokens.c) ---- */

struct rv_tok_layout;
/* The sequence rv_flat_tokens described in its metadata ("layout"): the layout
 * (its t0 set) and the times that go with it. */
typedef struct flat_tok_plan {
    double t0;           /* t0 on the container's clock, s */
    double time_origin;  /* the first frame's pts, s */
    double end_s;        /* where the tokens end, sequence time */
    double rec_start;    /* the recording's start, sequence time */
} flat_tok_plan;
rv_status flat_tokens_layout(const char *meta, struct rv_tok_layout *L, flat_tok_plan *p);

/* ---- interrupt (flat_interrupt.c) ---- */

/* The counter's value now, taken at a call's start. */
unsigned flat_interrupt_mark(void);
/* RV_ERR_IO "interrupted" when rv_flat_interrupt ran since mark, else RV_OK. */
rv_status flat_interrupt_check(unsigned mark);

#endif
