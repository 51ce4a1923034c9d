/* export_internal.h (internal to encoder/export): what the files of the export
 * (rv_export.h) share:
 *
 *   export_source.c   one embed output opened and checked for a level: its
 *                     facts, the tensors of the level, its labels
 *   export_manifest.c the manifest (export.json) read and written, and the
 *                     shards it lists checked
 *   export_opts.c     the defaults and the level names
 *   export_open.c     the folder, the outputs added (rv_export_open, _add,
 *                     _add_dir, _settings, _free)
 *   export_finish.c   the shards, their metadata and the manifest written
 *   export_npy.c      the .npy header (export_npy.h)
 * Rows are converted and normalised as embed writes them (st_convert.h); labels
 * ranked as `ringvit labels` ranks them (embed_labels_rank). */
#ifndef RV_EXPORT_INTERNAL_H
#define RV_EXPORT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "rv_export.h"
#include "rv_safetensors.h"

#define EXPORT_EMB_DIR "emb"
#define EXPORT_META_DIR "metadata"
#define EXPORT_EMB_FMT "emb/emb_%04d.npy"
#define EXPORT_META_FMT "metadata/metadata_%04d.jsonl"
#define EXPORT_LOCK ".export.lock"
#define EXPORT_MAX_SHARDS 100000000 /* file names stay below 9 digits */

/* FNV-1a, 64 bits: the fingerprints of an output. */
#define EXPORT_FNV_SEED UINT64_C(0xcbf29ce484222325)
static inline uint64_t export_fnv1a(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * UINT64_C(0x100000001b3);
    return h;
}

/* What tells an output's file apart from another, or from itself changed. */
typedef struct export_fp {
    int64_t size;           /* bytes of the file */
    uint64_t header;        /* FNV-1a of its safetensors header (8 + N bytes) */
    uint64_t rows;          /* FNV-1a of the exported tensors' bytes, in order:
                               the embeddings, then start and end (0: not computed) */
} export_fp;

/* One output opened for a level (export_source_open). */
typedef struct export_source {
    rv_safetensors *st;
    char *input;            /* metadata "source" */
    const char *model, *model_hash; /* metadata; owned by st */
    int dim;                /* config "dim" */
    rv_dtype dtype;         /* of its embeddings (metadata "dtype") */
    int normalized;         /* metadata normalize "l2" */
    int has_blocks;         /* block_pooled present */
    rv_export_level level;  /* the level opened (AUTO: block when has_blocks, else
                               segment, each checked) */
    int64_t rows;           /* at level */
    const rv_st_tensor *emb;    /* (rows, dim) or, global, (dim) */
    const rv_st_tensor *start, *end; /* (rows) F64; NULL for global */
    double t0, t1;          /* global: start_s, start_s + recording_s */
    const rv_st_tensor *logits; /* (rows, C) or (C); NULL: none at this level */
    int classes;            /* C */
    char **labels;          /* (classes) names; NULL: none in the metadata */
    int multi_label;        /* metadata multi_label "true": sigmoid, else softmax */
    export_fp fp;           /* size, header (rows at export_source_rows_fp) */
} export_source;

/* Opens and checks path for level: RV_ERR_FORMAT naming path and the problem
 * when it is not an embed output, a tensor disagrees with the metadata or the
 * other tensors, or (level block) it has no blocks. AUTO checks the segments
 * and, when it has them, the blocks, and selects the blocks if so. */
rv_status export_source_open(const char *path, rv_export_level level, export_source *out);
/* Checks and selects another level (not AUTO) of an open output. */
rv_status export_source_level(export_source *s, const char *path, rv_export_level level);
/* FNV-1a of the level's tensors, into s->fp.rows. */
void export_source_rows_fp(export_source *s);
/* Row r's start and end, s. */
void export_source_times(const export_source *s, int64_t r, double *t0, double *t1);
void export_source_close(export_source *s);



/* An output the manifest lists. */
typedef struct export_done {
    char *output;           /* as given when it was added */
    char *real;             /* its real path then */
    char *input;
    char *model;
    int64_t row_start, row_end;
    export_fp fp;
} export_done;

typedef struct export_shard {
    int64_t rows;
    int64_t emb_bytes, meta_bytes;
} export_shard;

typedef struct export_manifest {
    char *model, *model_hash;
    int dim;
    rv_export_level level;
    rv_dtype dtype;
    int normalize;
    int64_t shard_rows;
    int top_k;
    int outputs_normalized; /* the outputs' own normalize (metadata l2) */
    int64_t rows;
    export_shard *shards;   /* (nshards) */
    int nshards;
    export_done *done;      /* (ndone) */
    int ndone;
} export_manifest;

/* Reads dir/export.json: RV_ERR_IO when there is none, RV_ERR_FORMAT naming it
 * and the problem when it is not a manifest of this format and version. */
rv_status export_manifest_read(const char *dir, export_manifest *m);
/* Checks the shards m lists in dir: each emb file a .npy of m's dtype and width
 * with its rows, each metadata file its bytes; the last one may hold more rows
 * (a run that stopped between the shards' renames and the manifest's). */
rv_status export_manifest_check(const char *dir, const export_manifest *m);
/* Writes m as dir/export.json through a temporary name, synced and renamed. */
rv_status export_manifest_write(const char *dir, const export_manifest *m);
/* fsync(2) of a folder, so the renames in it last. */
rv_status export_sync_dir(const char *dir);
void export_manifest_clear(export_manifest *m);

/* The outputs added, for rv_export_finish (export_open.c keeps them). */
typedef struct export_item {
    char *path;             /* as given */
    char *output;           /* the same as UTF-8 text (for the JSON) */
    char *real;
    char *input;
    char *model;
    int has_blocks;
    int64_t rows[4];        /* by level (rv_export_level): -1 not checked */
    export_fp fp;           /* size, header */
} export_item;

/* A string -> index table (open addressing) for the real paths and fingerprints. */
typedef struct export_table {
    uint64_t *keys;         /* (cap) 0: empty */
    int *vals;              /* (cap) */
    size_t cap, n;
} export_table;

struct rv_export {
    rv_export_opts o;
    char *dir;
    int lock_fd;            /* -1: not held */
    int exists;             /* an export was read (m is its manifest) */
    export_manifest m;      /* the previous manifest, or the new export's facts */
    export_item *items;     /* (nitems) in the order added */
    int nitems, cap;
    int already;
    char *first;            /* the export's first output, for messages (NULL: none) */
    export_table by_real, by_fp; /* indices: >= 0 items, < 0 -(1 + manifest entry) */
    int finished;
};

rv_status export_table_put(export_table *t, uint64_t key, int val);
/* Every value stored under key in turn: *pos starts at 0; returns 0 when done. */
int export_table_next(const export_table *t, uint64_t key, size_t *pos, int *val);
void export_table_free(export_table *t);

/* The lock of dir/.export.lock (flock), so two runs never write one export. */
rv_status export_lock(rv_export *e);

/* 1 when name is a shard file "<stem>NNNN<ext>" (*tmp 0; *index its number)
 * or one's temporary file "<stem>NNNN<ext>.tmp.PID" (*tmp 1). */
int export_shard_file(const char *name, const char *stem, const char *ext, long *index, int *tmp);

#endif
