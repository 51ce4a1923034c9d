/* rv_flat.h: the library through flat calls, for other languages (the Python
 * package apps/python calls these through ctypes): options go in as JSON text,
 * results come out as named n-d arrays (rv_arrays) that the caller copies and
 * frees, and every handle is opaque, so no C struct layout is mirrored outside
 * C. Every call returns an rv_status and sets rv_last_error() (rv_status.h) on
 * failure. Long calls may run on any thread; several handles may be used on
 * different threads at once.
 *
 * Options (JSON object text; NULL or "" means {}; an unknown key or a value of
 * the wrong type is RV_ERR_INVALID naming the key):
 *   reader / tokens / embed:  "fps" (number, or "N/D" text; default 1),
 *     "size" (frame side px; default 224, for tokens/embed the model's),
 *     "start" (s on the container's clock; default the recording's start),
 *     "duration" (s; default to the end), "pad" (bool, letterbox),
 *     "video" / "audio" (bool, default true: false leaves the stream out),
 *     "video_stream" / "audio_stream" (int), "threads" (decoder threads;
 *     default 0, automatic), "chunk_frames" (reader only, default 32),
 *     "max_corrupt" (int N, or text "P%"), "decode_all" (bool) — the same
 *     defaults and meaning as the `ringvit frames` / `tokens` / `embed` flags of
 *     the same names ("fps" as a number is read as its decimal text, up to 6
 *     decimals, as --fps 29.97 is).
 *   tokens: the tokenizer flags of `ringvit tokens` with its defaults:
 *     "tubelet", "patch", "mean" / "std" ([3]), "audio_freq",
 *     "audio_freq_stride", "audio_time", "audio_stride", "audio_mean",
 *     "audio_std", "audio_window", "block" (s), "frame", "cls", "dist" (bool);
 *     or "model" (a spec as --model: folder, weights file or preset name, with
 *     "seed", and "attention" for a block= or frame span's windows) for the
 *     model's tokenizer as embed makes it; "cp", "shard" (the report's shards).
 *   encoder (rv_flat_encoder_open): "cp" (default 1), "device" ("cpu"),
 *     "strategy" ("ring", "allgather", "ulysses"), "attention" ("full",
 *     "window=S", "block=S", "frame"), "causal" (bool), "threads" (compute
 *     threads per rank; default all cores / cp), "seed" (preset weights).
 *   embed (rv_flat_encoder_embed): the reader keys but chunk_frames, plus
 *     "segment" (s, default 10; a block span's seconds with "block=S"), "hop"
 *     (s), "tokens" (bool: per-token outputs too). Only "device": "cpu" runs.
 */
#ifndef RV_FLAT_H
#define RV_FLAT_H

#include <stdint.h>

#include "rv_api.h"
#include "rv_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- named arrays ------------------------------------------------------------- */

/* A set of named n-d arrays (C order) plus a JSON metadata object. */
typedef struct rv_arrays rv_arrays;

RV_API int rv_arrays_count(const rv_arrays *a);
/* Index of the array called name, or -1. */
RV_API int rv_arrays_find(const rv_arrays *a, const char *name);
RV_API const char *rv_arrays_name(const rv_arrays *a, int i);
/* "u8", "i64", "f16", "bf16", "f32" or "f64". */
RV_API const char *rv_arrays_dtype(const rv_arrays *a, int i);
RV_API int rv_arrays_ndim(const rv_arrays *a, int i);
RV_API int64_t rv_arrays_dim(const rv_arrays *a, int i, int d);
/* The array's bytes (NULL for an empty array); valid until rv_arrays_free. */
RV_API const void *rv_arrays_data(const rv_arrays *a, int i);
/* The metadata as JSON object text ("{}" when none); valid until rv_arrays_free. */
RV_API const char *rv_arrays_meta(const rv_arrays *a);
RV_API void rv_arrays_free(rv_arrays **a);

/* A set made by the caller (to pass tokens back to rv_flat_encoder_embed_tokens):
 * empty, with meta_json (NULL or "": {}) as its metadata; rv_arrays_add copies
 * data (dims[ndim] elements of dtype; NULL only when empty). */
RV_API rv_status rv_arrays_new(const char *meta_json, rv_arrays **out);
RV_API rv_status rv_arrays_add(rv_arrays *a, const char *name, const char *dtype, int ndim,
                               const int64_t *dims, const void *data);

/* Frees a string a flat call returned. */
RV_API void rv_flat_free(void *p);

/* ---- texts the command prints (one copy, here; the probe's is rv_ingest.h's
 * rv_probe_json_text) ------------------------------------------------------------ */

/* What `ringvit --version` prints: "ringvit VERSION" and one "key: value" line
 * per build fact (malloc'd). */
RV_API rv_status rv_version_text(char **text);
/* What a model spec (--model) names: "folder" or "file" when it exists, "file"
 * for a missing path (with a '/' or a .safetensors name), else "preset". */
RV_API const char *rv_vit_spec_kind(const char *spec);

/* ---- calls -------------------------------------------------------------------- */

/* The JSON `ringvit probe --json` prints for path (malloc'd; rv_flat_free). */
RV_API rv_status rv_flat_probe(const char *path, char **json);

/* The build as JSON: {"version": "0.1.0", "text": what `ringvit --version`
 * prints, and each "key: value" line of it as a key (spaces as underscores):
 * "cuda", "mpi", "nccl", "media", "blas", "cpu_kernels", "threads"}, strings
 * (malloc'd; rv_flat_free). */
RV_API rv_status rv_flat_build_info(char **json);

/* Frames and audio in chunks, pulled one at a time (an hour never sits in
 * memory). Each chunk: "frames" u8 (N, S, S, 3), "frame_time" f64 (N),
 * "frame_source_time" f64 (N) (seconds on the container's clock, as `ringvit
 * frames` writes them), "audio" f32 (M) 16 kHz mono; meta {"first_frame",
 * "first_sample", "time_origin", "last"}. *chunk is NULL after the last one
 * (chunks with nothing are not handed out). A producer thread decodes one
 * chunk ahead; close stops it at its next chunk and joins it. After an error
 * next keeps returning it. One reader is used by one thread at a time. */
typedef struct rv_flat_reader rv_flat_reader;
RV_API rv_status rv_flat_reader_open(const char *path, const char *opts_json, rv_flat_reader **out);
RV_API rv_status rv_flat_reader_next(rv_flat_reader *r, rv_arrays **chunk);
RV_API void rv_flat_reader_close(rv_flat_reader **r);

/* The whole token sequence of path, the tensors `ringvit tokens -o` writes for
 * the same options (video_patches, audio_patches, audio_fbank, token_modality,
 * token_pos, token_time on the container's clock, token_window), bit for bit;
 * meta {"format", "time_origin", "probe": {...}, "tokens": {the command's
 * report}, "layout": {what rv_flat_encoder_embed_tokens rebuilds the sequence
 * from}}. */
RV_API rv_status rv_flat_tokens(const char *path, const char *opts_json, rv_arrays **out);

/* An encoder: a model and cp ranks (threads of this process). */
typedef struct rv_flat_encoder rv_flat_encoder;
RV_API rv_status rv_flat_encoder_open(const char *model, const char *opts_json,
                                      rv_flat_encoder **out);
/* The tensors `ringvit embed` writes for path with the same model and options
 * (f32, the same values): global, segments, segment_start / segment_end
 * (container clock), segment_tokens, video_mean, audio_mean, cls and dist (for
 * models with them), pooled, projected (when the model projects); with
 * "tokens": tokens, token_time, token_modality, token_pos. meta: model,
 * model_hash, config, family, cp, strategy, attention, hop_s, causal, fps,
 * size, segment_s, recording_s, time_origin, start_s, tokens, video_tokens,
 * audio_tokens, source. An interrupt is seen while the ranks tokenize. */
RV_API rv_status rv_flat_encoder_embed(rv_flat_encoder *e, const char *path, const char *opts_json,
                                       rv_arrays **out);
/* The same from tokens rv_flat_tokens made with "model" set to this model:
 * the set it returned, or one the caller rebuilt (rv_arrays_new with its
 * metadata, which holds the layout, + "video_patches" and "audio_patches"; the
 * other arrays are recomputed from the layout). opts: "segment", "hop",
 * "tokens" only. */
RV_API rv_status rv_flat_encoder_embed_tokens(rv_flat_encoder *e, const rv_arrays *tokens,
                                              const char *opts_json, rv_arrays **out);
/* The model's config as JSON (malloc'd; rv_flat_free). */
RV_API rv_status rv_flat_encoder_config(const rv_flat_encoder *e, char **json);
RV_API void rv_flat_encoder_close(rv_flat_encoder **e);

/* The ranked labels of an embed output (rv_embed_labels_read, what `ringvit
 * labels` prints): "index" i64 (rows, K) label ids by decreasing probability,
 * "prob" f32 (rows, K), "start" / "end" f64 (rows) s on the file's clock; meta
 * {"labels": [C names], "multi_label", "level": "block" | "recording"}. opts:
 * "top" (default 5), "multi_label" (bool; default the file's), "level" ("block",
 * "recording", "auto": block when the file has block_logits). */
RV_API rv_status rv_flat_labels(const char *path, const char *opts_json, rv_arrays **out);

/* Asks every flat call in progress, on any thread, to stop soon: they return
 * RV_ERR_IO with the message "interrupted". Calls started afterwards are not
 * affected (a call compares a counter this increments with its value at the
 * call's start). Async-signal-safe. */
RV_API void rv_flat_interrupt(void);

#ifdef __cplusplus
}
#endif
#endif
