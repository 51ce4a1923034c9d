/* rv_export.h: finished `embed` outputs into an export for vector search: the
 * rows of one level of every output (each block, each segment, or each
 * recording) as .npy shards of N x D, and beside each shard its metadata, one
 * JSON line per row, so row k of emb/emb_NNNN.npy is line k of
 * metadata/metadata_NNNN.jsonl. What FAISS, autofaiss, clip-retrieval's
 * embedding-reader and Milvus bulk import read. The `ringvit export` command
 * and C programs make the same calls:
 *
 *   rv_export_open     the export folder: a new one, or with opts.resume an
 *                      existing one to add to (its manifest and shards checked)
 *   rv_export_add      an output file, or rv_export_add_dir a folder of them
 *                      (an `embed --out-dir` folder: the outputs its index.jsonl
 *                      lists); each is read and checked now, nothing is written
 *   rv_export_finish   the rows written: new shards, the last partial shard of
 *                      an earlier run completed, then the manifest
 *   rv_export_free
 *
 * The folder:
 *   EXPORT/export.json                 the manifest (written last)
 *   EXPORT/emb/emb_NNNN.npy            (N, D) '<f4' or '<f2', C order, .npy 1.0
 *   EXPORT/metadata/metadata_NNNN.jsonl one object per row: {"row", "input",
 *                      "output", "level", "index", "t_start", "t_end", "model",
 *                      "model_hash"[, "labels": [{"label", "id", "p"}, ...]]}
 * Every shard but the last holds opts.shard_rows rows, so row r of the export is
 * row r % shard_rows of shard r / shard_rows ("row" in its metadata).
 *
 * The manifest (JSON): format RV_EXPORT_FORMAT, version, model, model_hash, dim,
 * dtype ("f32", "f16"), level, normalize, shard_rows, top_k, rows, the shards
 * (file names, rows, bytes of each file) and the outputs exported (path as
 * given, real path, input, model, row_start, row_end, and a fingerprint: size,
 * FNV-1a of the safetensors header and of the exported tensors), so a resumed
 * export knows which outputs are new and refuses one that changed.
 *
 * Every file is written under a temporary name, synced and renamed; the
 * manifest last. A run that fails or is interrupted leaves the export as its
 * manifest describes it: shard files it lists are replaced only by a completed
 * last shard whose first rows are the same bytes. */
#ifndef RV_EXPORT_H
#define RV_EXPORT_H

#include <stdint.h>

#include "rv_api.h"
#include "rv_safetensors.h"
#include "rv_status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RV_EXPORT_FORMAT "ringvit-export" /* the manifest's "format" */
#define RV_EXPORT_VERSION 1               /* the manifest's "version" */
#define RV_EXPORT_MANIFEST "export.json"
#define RV_EXPORT_SHARD_ROWS 100000       /* default opts.shard_rows */
#define RV_EXPORT_TOP_K 5                 /* default opts.top_k */
#define RV_EXPORT_MAX_TOP_K 100

typedef enum rv_export_level {
    RV_EXPORT_AUTO = 0, /* a new export: block when every output has blocks, else
                           segment; a resumed one: the manifest's */
    RV_EXPORT_BLOCK,    /* block_pooled (G, D), block_start / block_end, block_logits */
    RV_EXPORT_SEGMENT,  /* segments (G, D), segment_start / segment_end */
    RV_EXPORT_GLOBAL,   /* global (D): one row, the recording's start_s and
                           start_s + recording_s; logits */
} rv_export_level;

typedef struct rv_export_opts {
    rv_export_level level;
    rv_dtype dtype;         /* RV_F32 (default) or RV_F16: the shards' */
    int normalize;          /* 1: each row divided by its L2 norm (a zero row stays
                               zero), as embed --normalize */
    int64_t shard_rows;     /* the most rows of a shard (default RV_EXPORT_SHARD_ROWS) */
    int top_k;              /* labels per row where an output holds logits (default
                               RV_EXPORT_TOP_K; 0: none): softmax, or sigmoid where
                               its metadata multi_label is true */
    int resume;             /* 1: add to the export at the folder (a folder without
                               one starts it); 0: an existing export is refused.
                               Either way level (unless AUTO), dtype, normalize,
                               shard_rows and top_k must be the manifest's */
    /* rv_export_finish: each output as its rows are written (may be NULL) */
    void (*progress)(void *user, const char *output, int64_t rows);
    void *user;
} rv_export_opts;

/* The defaults above. */
RV_API void rv_export_opts_default(rv_export_opts *o);

/* "block", "segment", "global" ("auto" for RV_EXPORT_AUTO); RV_ERR_INVALID for
 * another name. */
RV_API rv_status rv_export_level_parse(const char *name, rv_export_level *out);
RV_API const char *rv_export_level_name(rv_export_level level);

/* The settings of the export at dir (level, dtype, normalize, shard_rows,
 * top_k) into o, its other fields left alone: a resumed run keeps them.
 * RV_ERR_IO when dir holds no export, RV_ERR_FORMAT naming the problem when its
 * manifest cannot be read. */
RV_API rv_status rv_export_settings(const char *dir, rv_export_opts *o);

typedef struct rv_export rv_export;

/* The export at dir with o (copied). Refused (*out NULL, RV_ERR_INVALID or
 * RV_ERR_FORMAT naming the folder or file): dir is not a folder, or is a
 * non-empty folder that holds no export; an export without o->resume ("exists;
 * --resume to add to it"); a manifest that cannot be read, settings other than
 * the manifest's, a shard it lists that is missing or not its size (truncated).
 * Nothing is written until rv_export_finish; dir is made then. */
RV_API rv_status rv_export_open(const char *dir, const rv_export_opts *o, rv_export **out);

/* Adds the output at path (a `ringvit embed` .safetensors file), read and checked
 * now: RV_ERR_FORMAT naming it when it is not such an output or its tensors
 * disagree with its metadata or with each other (shapes, dtype, times), or it
 * has no blocks for the block level; RV_ERR_INVALID naming it and the export's
 * first output when their models (model_hash) or dimensions differ, or when
 * without normalize their normalize differs. *already (may be NULL) is 1 when
 * the output is in the export already (resume; the same file given twice)
 * and it adds nothing; an output the export holds that has changed since is
 * RV_ERR_INVALID. */
RV_API rv_status rv_export_add(rv_export *e, const char *path, int *already);

/* Adds the outputs dir/index.jsonl lists (an `embed --out-dir` folder: the
 * inputs whose output is complete, status ok or skipped, in input order; failed
 * inputs are not listed), each at dir/ and its file name. *taken: the outputs
 * listed, *already: those of them the export holds (each may be NULL).
 * RV_ERR_FORMAT naming the line of an index that cannot be read; a folder
 * without index.jsonl is RV_ERR_IO. */
RV_API rv_status rv_export_add_dir(rv_export *e, const char *dir, int *taken, int *already);

typedef struct rv_export_summary {
    rv_export_level level;  /* the export's */
    int dim;
    int outputs;            /* outputs this run exported */
    int already;            /* outputs added that the export held already */
    int64_t rows;           /* rows this run added */
    int64_t total_rows;     /* rows of the export */
    int shards;             /* shards of the export */
    int first_written;      /* the first shard this run wrote (-1: none) */
} rv_export_summary;

/* Writes the rows of the outputs added (each output's file is checked again to
 * be what was added), the metadata and the manifest (see above), and fills s
 * (may be NULL). With nothing new the export is left as it was. A run with no
 * output at all is RV_ERR_INVALID. On failure the manifest is the previous
 * one and the temporary files are removed. Call once. */
RV_API rv_status rv_export_finish(rv_export *e, rv_export_summary *s);

/* Sets *e to NULL; NULL or *e == NULL is a no-op. */
RV_API void rv_export_free(rv_export **e);

#ifdef __cplusplus
}
#endif
#endif
