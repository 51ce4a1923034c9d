/* bench_common.h: what the benches share: the sgemm rate every compute bench
 * sets its figures against (measured in the same run, on the same backend and
 * threads), and the synthetic token slices of the encoder benches. */
#ifndef RV_BENCH_COMMON_H
#define RV_BENCH_COMMON_H

#include <stdint.h>

#include "rv_backend.h"
#include "rv_cp_attention.h"
#include "rv_shard.h"
#include "model_cli.h"
#include "rv_vit.h"

/* Fastest of `repeat` runs (after one warm-up) of the backend's sgemm on
 * (2048 x 2048) @ (2048 x 2048), in GFLOP/s. */
rv_status rv_bench_sgemm_rate(rv_backend *be, int repeat, double *gflops);
/* The same for (n x n) @ (n x n) in the backend's memory, each call waited for;
 * on "cuda" that is cuBLAS with bf16 tensor cores and f32 accumulation. */
rv_status rv_bench_gemm_rate(rv_backend *be, int n, int repeat, double *gflops);
/* The reference GEMM size of a backend: 2048 on cpu, 8192 on a GPU. */
int rv_bench_gemm_size(const rv_backend *be);
/* The CPU attention kernels in use for bench headers ("avx512", "avx2", "blas"),
 * or "refused" where RINGVIT_CPU_KERNELS names a set this CPU lacks. */
const char *rv_bench_cpu_kernels(void);
/* The backend of --device cpu|cuda (threads: the CPU backend's). */
rv_status rv_bench_backend_create(const char *device, int threads, rv_backend **be);

/* A synthetic rank slice of a sequence: global tokens g < cls are the special
 * tokens; for a model with video weights, token i = g - cls is a video token on
 * the 14 x 14 grid of a 224 px frame (the presets' grid) of tubelet i / 196,
 * patch i % 196, starting at T s per tubelet (tubelet T at 1 frame/s); for an
 * audio-only model (AST) an audio token of time step i / bands, band i % bands,
 * starting at step * stride * 10 ms. Patch values from a hash of (g, element).
 * t points into the arrays. */
#define RV_BENCH_GRID 14
typedef struct rv_bench_slice {
    rv_vit_tokens t;
    uint8_t *mod;   /* (len) */
    int64_t *pos;   /* (len, 3) */
    double *time;   /* (len, 2) */
    int64_t *window; /* (len) each token's block under a block or frame span: the
                        tubelet (frame), floor(start / W) (block); NULL otherwise */
    float *video;   /* (nvideo, T*P*P*3) */
    float *audio;   /* (naudio, F*W) */
} rv_bench_slice;

/* The video and audio tokens of a synthetic sequence of seq tokens (special
 * tokens included) for config c, as rv_bench_slice_make lays them out. */
void rv_bench_counts(const rv_vit_config *c, int64_t seq, int64_t *nvideo, int64_t *naudio);

/* Rank r's slice under plan p for a model of config c; span (NULL: full) sets the
 * block index of every token for block and frame spans (special tokens: block 0). */
rv_status rv_bench_slice_make(const rv_vit_config *c, const rv_shard_plan *p, int r,
                              const rv_span *span, rv_bench_slice *s);
void rv_bench_slice_free(rv_bench_slice *s);

/* The synthetic token times of the span benches (bench attention, bench ring):
 * `rate` tokens per second laid out as the tokenizer lays a recording out, in 2 s
 * interleaving windows of per = round(2 rate) rows: a window's video tokens first
 * (two thirds, 4 frames of 0.5 s: a frame's tokens start together), then its
 * audio tokens evenly over the 2 s. A window span (window > 0) keys each token by
 * its time with reach W / 2; a block span by floor(time / block) with reach 0. */
typedef struct rv_bench_span_seq {
    double *time;  /* (seq) start times, s */
    double *key;   /* (seq) span keys */
    double reach;
    int per;       /* tokens per 2 s window */
} rv_bench_span_seq;

rv_status rv_bench_span_seq_make(double window, double block, double rate, int64_t seq,
                                 rv_bench_span_seq *s);
/* --window W, --block B and --rate R of the span benches: 1 when argv[*i] is one
 * of them (its value taken into window, block or rate, *rc 0 or an exit code
 * after a message), 0 when not. */
int rv_bench_span_flag(const char *cmd, int argc, char **argv, int *i, double *window,
                       double *block, double *rate, int *rc);
void rv_bench_span_seq_free(rv_bench_span_seq *s);

/* The options of the encoder benches (bench encoder, bench train). */
typedef struct rv_bench_model_opts {
    char preset[16];          /* --preset (default tiny) */
    const char *model;        /* --model DIR|FILE|PRESET (NULL: the preset) */
    int64_t seq;              /* --seq S: tokens, CLS included */
    int cp, causal, threads, repeat, json;
    rv_cp_strategy strategy;  /* --strategy (default ring) */
    rv_span span;             /* --attention (default full) */
} rv_bench_model_opts;

/* The shard plan of the encoder benches: zigzag for causal full attention,
 * contiguous otherwise (spans need it). */
rv_status rv_bench_plan(const rv_bench_model_opts *o, rv_shard_plan *plan);

/* The model of o (--model, else --preset; random weights seed 0 for a preset),
 * checked against o's ranks (ulysses). Returns 0 or an exit code after a message. */
int rv_bench_model_open(const char *cmd, const rv_bench_model_opts *o, model_cli *mc);

/* Parses argv[1..] of `ringvit <cmd>` into o (default seq: seq); returns 0 or an
 * exit code (usage errors are printed). */
int rv_bench_model_parse(const char *cmd, int argc, char **argv, int64_t seq,
                         rv_bench_model_opts *o);

#endif
