/* bench_common.h: what the benches share: the report (a table of rows with an
 * OK/FAILED footer, or one JSON object with --json, nccl-tests style), flag-table
 * fragments and takes (cli_flags.h), the sgemm rate every compute bench sets its figures against (measured in
 * the same run, on the same backend and threads), and the synthetic token slices
 * of the encoder benches. */
#ifndef RV_BENCH_COMMON_H
#define RV_BENCH_COMMON_H

#include <jansson.h>
#include <stdint.h>

#include "cli_flags.h"
#include "rv_backend.h"
#include "rv_cp_attention.h"
#include "rv_shard.h"
#include "model_cli.h"
#include "rv_vit.h"

/* ---- the report ------------------------------------------------------------------- */

typedef enum bench_type {
    RV_BENCH_INT,  /* long long; a "%...lld" conversion; a JSON integer */
    RV_BENCH_REAL, /* double; a floating conversion; a JSON real, null when not finite */
    RV_BENCH_TEXT, /* const char *; a "%...s" conversion; a JSON string */
} bench_type;

/* One column of a table. title NULL: the column is JSON only; key NULL: table
 * only. The heading takes the width and '-' flag of fmt, so a bench can show a
 * figure in one unit in the table ("sent(MB)") and another in JSON ("bytes_sent")
 * as two columns, and order each side as it likes. */
typedef struct bench_col {
    const char *title; /* table heading, e.g. "time(ms)" */
    const char *fmt;   /* printf conversion with its width, e.g. "%10.2f" */
    const char *key;   /* JSON key of the row's object, e.g. "ms" */
    bench_type type;
} bench_col;

/* One cell of a row, by its column's type. */
typedef union bench_val {
    long long i;
    double f;
    const char *s;
} bench_val;

/* A bench's output: in table mode, notes ("# ..." lines), table headings and rows
 * print as they come and the footer ends it ("# OK" or "# FAILED: why"); with
 * --json nothing prints until the end, when the object built meanwhile ("bench",
 * the bench's own keys in the order set, each table's rows, "ok") goes to stdout. */
typedef struct bench_report {
    int json;                  /* 1: one JSON object at the end */
    json_t *root;              /* the object (built in both modes) */
    const bench_col *cols;  /* the current table's columns */
    int ncols;
    const char *rows_key;      /* its rows' array in root; NULL: its row's keys go to root */
    json_t *rows;              /* that array, once it has a row */
} bench_report;

/* Starts the report of bench `bench` ("attention"): root {"bench": bench}. */
void bench_report_init(bench_report *r, const char *bench, int json);
/* Frees what r holds (after bench_finish, or on an error path); idempotent. */
void bench_report_free(bench_report *r);
/* root[key] = value (taken: the reference is the report's). */
void bench_set(bench_report *r, const char *key, json_t *value);
/* A "# text" line in table mode ("#" alone for ""), nothing with --json. */
void bench_note(bench_report *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Starts a table of cols[0..ncols): prints its heading line in table mode; its rows
 * go to root[rows_key] (an array, made at the first row), or with rows_key NULL
 * (a table of one row) their keys straight into root. */
void bench_table(bench_report *r, const char *rows_key, const bench_col *cols,
                    int ncols);
/* One row of the current table: vals[c] for cols[c]. */
void bench_add_row(bench_report *r, const bench_val *vals);
/* Ends the report: root["ok"] = ok, then the JSON object, or the footer "# OK" /
 * "# FAILED: <why>" (why: fmt and its arguments, read only when !ok). Frees r.
 * Returns RV_EXIT_OK, or RV_EXIT_FAIL when !ok or the output failed. */
int bench_finish(bench_report *r, int ok, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- the flags (cli_flags.h) ---------------------------------------------------------- */

/* --window W, --block B and --rate R of the span benches (bench attention, bench
 * ring), into the doubles at w, b and r. */
#define RV_BENCH_SPAN_FLAGS(w, b, r)                                                       \
    {.name = "--window", .kind = RV_CLI_DOUBLE, .dst = (w), .lo = 1e-6, .hi = 1e6},          \
    {.name = "--block", .kind = RV_CLI_DOUBLE, .dst = (b), .lo = 1e-6, .hi = 1e6},           \
    {.name = "--rate", .kind = RV_CLI_DOUBLE, .dst = (r), .lo = 1.0, .hi = 1e6}

/* The flags of the attention benches (bench attention, bench ring) in the struct
 * at o, which has int heads, dim, causal, backward, json; const char *device; and
 * double window, block, rate. */
#define RV_BENCH_ATTN_FLAGS(o)                                                             \
    {.name = "--heads", .kind = RV_CLI_INT, .dst = &(o)->heads, .lo = 1, .hi = 1024},        \
    {.name = "--dim", .kind = RV_CLI_INT, .dst = &(o)->dim, .lo = 1, .hi = 1024},            \
    {.name = "--device", .kind = RV_CLI_DEVICE, .dst = &(o)->device},                       \
    RV_BENCH_SPAN_FLAGS(&(o)->window, &(o)->block, &(o)->rate),                             \
    {.name = "--causal", .kind = RV_CLI_SWITCH, .dst = &(o)->causal},                       \
    {.name = "--backward", .kind = RV_CLI_SWITCH, .dst = &(o)->backward},                   \
    {.name = "--json", .kind = RV_CLI_SWITCH, .dst = &(o)->json}

/* --strategy ring|allgather|ulysses into the rv_cp_strategy at dst (a take). */
int bench_take_strategy(const char *cmd, const char *name, const char *value, void *dst);

/* ---- the GEMM reference ------------------------------------------------------------- */

/* Fastest of `repeat` runs (after one warm-up) of the backend's sgemm on
 * (2048 x 2048) @ (2048 x 2048), in GFLOP/s. */
rv_status bench_sgemm_rate(rv_backend *be, int repeat, double *gflops);
/* The same for (n x n) @ (n x n) in the backend's memory, each call waited for;
 * on "cuda" that is cuBLAS with bf16 tensor cores and f32 accumulation. */
rv_status bench_gemm_rate(rv_backend *be, int n, int repeat, double *gflops);
/* The reference GEMM size of a backend: 2048 on cpu, 8192 on a GPU. */
int bench_gemm_size(const rv_backend *be);
/* The CPU attention kernels in use for bench headers ("avx512", "avx2", "blas"),
 * or "refused" where RINGVIT_CPU_KERNELS names a set this CPU lacks. */
const char *bench_cpu_kernels(void);
/* The backend of --device cpu|cuda (threads: the CPU backend's). */
rv_status bench_backend_create(const char *device, int threads, rv_backend **be);

/* A synthetic rank slice of a sequence: global tokens g < cls are the special
 * tokens; for a model with video weights, token i = g - cls is a video token on
 * the 14 x 14 grid of a 224 px frame (the presets' grid) of tubelet i / 196,
 * patch i % 196, starting at T s per tubelet (tubelet T at 1 frame/s); for an
 * audio-only model (AST) an audio token of time step i / bands, band i % bands,
 * starting at step * stride * 10 ms. Patch values from a hash of (g, element).
 * t points into the arrays. */
#define RV_BENCH_GRID 14
typedef struct bench_slice {
    rv_vit_tokens t;
    uint8_t *mod;   /* (len) */
    int64_t *pos;   /* (len, 3) */
    double *time;   /* (len, 2) */
    int64_t *window; /* (len) each token's block under a block or frame span: the
                        tubelet (frame), floor(start / W) (block); NULL otherwise */
    float *video;   /* (nvideo, T*P*P*3) */
    float *audio;   /* (naudio, F*W) */
} bench_slice;

/* The video and audio tokens of a synthetic sequence of seq tokens (special
 * tokens included) for config c, as bench_slice_make lays them out. */
void bench_counts(const rv_vit_config *c, int64_t seq, int64_t *nvideo, int64_t *naudio);

/* Rank r's slice under plan p for a model of config c; span (NULL: full) sets the
 * block index of every token for block and frame spans (special tokens: block 0). */
rv_status bench_slice_make(const rv_vit_config *c, const rv_shard_plan *p, int r,
                              const rv_span *span, bench_slice *s);
void bench_slice_free(bench_slice *s);

/* The synthetic token times of the span benches (bench attention, bench ring):
 * `rate` tokens per second laid out as the tokenizer lays a recording out, in 2 s
 * interleaving windows of per = round(2 rate) rows: a window's video tokens first
 * (two thirds, 4 frames of 0.5 s: a frame's tokens start together), then its
 * audio tokens evenly over the 2 s. A window span (window > 0) keys each token by
 * its time with reach W / 2; a block span by floor(time / block) with reach 0. */
typedef struct bench_span_seq {
    double *time;  /* (seq) start times, s */
    double *key;   /* (seq) span keys */
    double reach;
    int per;       /* tokens per 2 s window */
} bench_span_seq;

rv_status bench_span_seq_make(double window, double block, double rate, int64_t seq,
                                 bench_span_seq *s);
void bench_span_seq_free(bench_span_seq *s);

/* The options of the encoder benches (bench encoder, bench train). */
typedef struct bench_model_opts {
    char preset[16];          /* --preset (default tiny) */
    const char *model;        /* --model DIR|FILE|PRESET (NULL: the preset) */
    int64_t seq;              /* --seq S: tokens, CLS included */
    int cp, causal, threads, repeat, json;
    rv_cp_strategy strategy;  /* --strategy (default ring) */
    rv_span span;             /* --attention (default full) */
    rv_precision precision;   /* --precision (default auto: f32 on the CPU) */
} bench_model_opts;

/* The shard plan of the encoder benches: zigzag for causal full attention,
 * contiguous otherwise (spans need it). */
rv_status bench_plan(const bench_model_opts *o, rv_shard_plan *plan);

/* The model of o (--model, else --preset; random weights seed 0 for a preset),
 * checked against o's ranks (rv_cp_strategy_check). Returns 0 or an exit code after
 * a message. */
int bench_model_open(const char *cmd, const bench_model_opts *o, model_cli *mc);

/* Starts r for an encoder bench (`bench`: "encoder", "train") of o on a model of
 * config cfg: the JSON keys model .. cpu_kernels, and the heading line and "#". */
void bench_model_report_init(bench_report *r, const char *bench,
                                const bench_model_opts *o, const rv_vit_config *cfg);
/* A stats' time per part: as a JSON object (embed_s, attn_s, attn_kernel_s,
 * attn_wait_s, mlp_s, other_s), and as a note line "<what>: embed ..., ...". */
json_t *bench_parts_json(const rv_vit_stats *s);
void bench_parts_note(bench_report *r, const char *what, const rv_vit_stats *s);

/* Parses argv[1..] of `ringvit <cmd>` into o (default seq: seq); returns 0 or an
 * exit code (usage errors are printed). */
int bench_model_parse(const char *cmd, int argc, char **argv, int64_t seq,
                         bench_model_opts *o);

#endif
