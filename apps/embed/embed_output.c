/* embed_output.c: the output file of `ringvit embed`, one safetensors file per
 * input:
 *   global          (D) F32      mean of every token's output but CLS
 *   segments        (G, D) F32   means over windows of --segment seconds
 *   segment_start   (G) F64      s on the container's clock (as ffprobe and PyAV
 *                                give pts; metadata time_origin is the first frame's)
 *   segment_end     (G) F64
 *   segment_tokens  (G) I64      tokens pooled in each window
 *   video_mean      (D) F32      mean of the video tokens (zeros when none)
 *   audio_mean      (D) F32      mean of the audio tokens (zeros when none)
 *   cls             (D) F32      the CLS token's output (models with one)
 *   dist            (D) F32      the distillation token's output (AST)
 *   pooled          (D) F32      the model family's pooled output (rv_vit_pool_head)
 *   projected       (P) F32      its projection (CLIP's visual_projection, when stored)
 * and with --tokens, every token in sequence order:
 *   tokens          (S, D) F32
 *   token_time      (S, 2) F64   start, end, s on the container's clock
 *   token_modality  (S) U8       0 video, 1 audio, 2 cls
 *   token_pos       (S, 3) I64   video (tubelet, row, column), audio (step, band, 0)
 * The F32 embeddings (global .. projected, tokens) are written as --dtype says:
 * F32, or F16 / BF16 rounded to nearest even (F16: subnormals kept, overflow to
 * infinity; NaN stays NaN); with --normalize the rows of global, segments and
 * tokens are first divided by their L2 norm (a zero row stays zero).
 * Metadata (strings): format, source, probe (JSON), model, model_hash, config
 * (JSON), family, random_weights, cp, strategy, attention, hop_s, causal, fps, size,
 * segment_s, recording_s, time_origin (the first video frame's pts, s), start_s
 * (where the sample grid starts, s on the same clock), tokens, video_tokens, audio_tokens, dtype (f32, f16,
 * bf16), normalize (none, l2), ringvit_version.
 *
 * Writing goes through rv_st_writer_write, which writes "<path>.tmp.<pid>" and
 * renames it when complete; a run killed meanwhile leaves that temporary file,
 * which embed_output_clean_stale removes on the next run. Only a regular file
 * (or nothing) is replaced; a symlink is written through to its target, whose
 * folder then holds the temporary file (out_target_path). "-" (-o -) is standard
 * output, written in one pass (out_write_st). */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "embed.h"
#include "out_path.h"
#include "rv_safetensors.h"
#include "rv_version.h"
#include "spill_file.h"

static rv_status meta_int(rv_st_writer *w, const char *key, int64_t v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%lld", (long long)v);
    return rv_st_writer_meta(w, key, buf);
}

static rv_status meta_num(rv_st_writer *w, const char *key, double v)
{
    char buf[40];
    snprintf(buf, sizeof buf, "%.17g", v);
    return rv_st_writer_meta(w, key, buf);
}

/* ---- --dtype and --normalize ------------------------------------------------ */

const char *embed_output_dtype_name(rv_dtype dtype)
{
    return dtype == RV_F16 ? "f16" : dtype == RV_BF16 ? "bf16" : "f32";
}

/* IEEE half, rounded to nearest even: subnormals below 2^-14, infinity from
 * 65520 up (the halfway point past the largest half, 65504), NaN kept a NaN. */
static uint16_t f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    const uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) /* NaN: quiet, the payload's top bits kept */
        return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    if (ax >= 0x477ff000u) /* infinity, or rounds to it */
        return (uint16_t)(sign | 0x7c00u);
    if (ax >= 0x38800000u) { /* normal: rebias the exponent, round off 13 bits */
        uint32_t h = (ax - 0x38000000u) >> 13, rem = ax & 0x1fffu;
        if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
            h++; /* a carry into the exponent is still right */
        return (uint16_t)(sign | h);
    }
    /* subnormal (or zero): the value in units of 2^-24, rounded */
    const uint32_t e = ax >> 23;
    if (e < 102) /* below 2^-25: rounds to zero */
        return (uint16_t)sign;
    const uint32_t mant = (ax & 0x7fffffu) | 0x800000u, shift = 126 - e; /* 14..24 */
    uint32_t h = mant >> shift, rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1u)))
        h++; /* 0x400: the smallest normal, also right */
    return (uint16_t)(sign | h);
}

/* bfloat16, rounded to nearest even (overflow to infinity); NaN kept a NaN. */
static uint16_t f32_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/* rows x cols floats as written: each row divided by its L2 norm (norm; a zero
 * row stays zero), then converted to dtype, into dst (rows * cols elements). */
static void rows_out(const float *x, int64_t rows, int64_t cols, int norm, rv_dtype dtype,
                     void *dst)
{
    for (int64_t r = 0; r < rows; r++) {
        const float *row = x + r * cols;
        double n = 0;
        if (norm) {
            for (int64_t c = 0; c < cols; c++)
                n += (double)row[c] * row[c];
            n = sqrt(n);
        }
        for (int64_t c = 0; c < cols; c++) {
            const float v = n > 0 ? (float)(row[c] / n) : row[c];
            const int64_t i = r * cols + c;
            if (dtype == RV_F16)
                ((uint16_t *)dst)[i] = f32_to_f16(v);
            else if (dtype == RV_BF16)
                ((uint16_t *)dst)[i] = f32_to_bf16(v);
            else
                ((float *)dst)[i] = v;
        }
    }
}

/* The buffers of the converted embeddings, freed with the writer. */
#define OUT_MAX_OWNED 12
typedef struct out_bufs {
    void *owned[OUT_MAX_OWNED];
    int n;
} out_bufs;

/* Adds x (rows, cols) F32 as set->dtype says, normalised when norm: x itself
 * when nothing changes, else a converted copy kept in b. */
static rv_status add_embedding(rv_st_writer *w, out_bufs *b, const embed_settings *s,
                               const char *name, int ndim, const int64_t *shape,
                               const float *x, int norm)
{
    norm = norm && s->normalize;
    if (s->dtype == RV_F32 && !norm)
        return rv_st_writer_add(w, name, RV_F32, ndim, shape, x);
    const int64_t cols = shape[ndim - 1], rows = ndim == 2 ? shape[0] : 1;
    void *dst = malloc((size_t)(rows * cols) * rv_dtype_size(s->dtype) + 1);
    if (!dst || b->n == OUT_MAX_OWNED) {
        free(dst);
        return rv_fail(RV_ERR_NOMEM, "out of memory converting %s", name);
    }
    b->owned[b->n++] = dst;
    rows_out(x, rows, cols, norm, s->dtype, dst);
    return rv_st_writer_add(w, name, s->dtype, ndim, shape, dst);
}

/* The tokens (S, D), converted through a scratch file beside the output a
 * block of rows at a time (they may not fit in memory twice). */
static rv_status add_tokens(rv_st_writer *w, spill *sp, const embed_output *o,
                            const int64_t *shape)
{
    const embed_settings *s = o->set;
    if (s->dtype == RV_F32 && !s->normalize)
        return rv_st_writer_add(w, "tokens", RV_F32, 2, shape, o->tokens);
    const int64_t S = shape[0], D = shape[1], block = 4096;
    const size_t esz = rv_dtype_size(s->dtype);
    void *buf = malloc((size_t)(block * D) * esz + 1);
    rv_status st = buf ? spill_open(sp, o->path) : rv_fail(RV_ERR_NOMEM, "out of memory");
    for (int64_t r = 0; r < S && st == RV_OK; r += block) {
        const int64_t n = S - r < block ? S - r : block;
        rows_out(o->tokens + r * D, n, D, s->normalize, s->dtype, buf);
        st = spill_write(sp, buf, (size_t)(n * D) * esz);
    }
    free(buf);
    if (st == RV_OK)
        st = spill_map(sp);
    if (st == RV_OK)
        st = rv_st_writer_add(w, "tokens", s->dtype, 2, shape, sp->map);
    return st;
}

rv_status embed_output_write(const embed_output *o)
{
    const embed_settings *s = o->set;
    const rv_vit_pooled *p = o->pooled;
    const rv_tok_layout *L = o->L;
    const int64_t D = p->dim, G = p->segments, S = L->seq;
    int64_t d1[1] = {D}, g1[1] = {G}, gd[2] = {G, D}, s1[1] = {S}, s2[2] = {S, 2},
            s3[2] = {S, 3}, sd[2] = {S, D};
    char fps[32];
    snprintf(fps, sizeof fps, "%d/%d", L->ingest.fps_num, L->ingest.fps_den);
    rv_st_writer *w = NULL;
    out_bufs bufs = {.n = 0};
    spill tok_sp = {.fd = -1};
    rv_status st;
    char attention[64];
    /* Metadata is UTF-8: a file name that is not keeps its other bytes as \xNN. */
    char *source = cli_utf8_text(o->source);
    if (!source)
        return rv_fail(RV_ERR_NOMEM, "%s: out of memory", o->path);
    rv_span_format(&s->span, attention, sizeof attention);
    /* 8-byte elements first, then 4, then 1: every tensor starts aligned. */
    if ((st = rv_st_writer_new(&w)) != RV_OK ||
        (st = rv_st_writer_add(w, "segment_start", RV_F64, 1, g1, p->segment_start)) != RV_OK ||
        (st = rv_st_writer_add(w, "segment_end", RV_F64, 1, g1, p->segment_end)) != RV_OK ||
        (st = rv_st_writer_add(w, "segment_tokens", RV_I64, 1, g1, p->segment_tokens)) != RV_OK)
        goto end;
    if (s->tokens &&
        ((st = rv_st_writer_add(w, "token_time", RV_F64, 2, s2, o->token_time)) != RV_OK ||
         (st = rv_st_writer_add(w, "token_pos", RV_I64, 2, s3, o->token_pos)) != RV_OK))
        goto end;
    /* The embeddings (4 or 2 bytes an element), normalised rows first. */
    if ((st = add_embedding(w, &bufs, s, "global", 1, d1, p->global, 1)) != RV_OK ||
        (st = add_embedding(w, &bufs, s, "segments", 2, gd, p->segment, 1)) != RV_OK ||
        (st = add_embedding(w, &bufs, s, "video_mean", 1, d1, p->modality_mean, 0)) != RV_OK ||
        (st = add_embedding(w, &bufs, s, "audio_mean", 1, d1, p->modality_mean + D, 0)) != RV_OK)
        goto end;
    if (s->model->cfg.cls && (st = add_embedding(w, &bufs, s, "cls", 1, d1, p->cls, 0)) != RV_OK)
        goto end;
    if (s->model->cfg.cls > 1 &&
        (st = add_embedding(w, &bufs, s, "dist", 1, d1, p->dist, 0)) != RV_OK)
        goto end;
    if (p->pooled && (st = add_embedding(w, &bufs, s, "pooled", 1, d1, p->pooled, 0)) != RV_OK)
        goto end;
    int64_t pj[1] = {p->proj_dim};
    if (p->proj_dim > 0 &&
        (st = add_embedding(w, &bufs, s, "projected", 1, pj, p->projected, 0)) != RV_OK)
        goto end;
    if (s->tokens &&
        ((st = add_tokens(w, &tok_sp, o, sd)) != RV_OK ||
         (st = rv_st_writer_add(w, "token_modality", RV_U8, 1, s1, o->token_modality)) != RV_OK))
        goto end;
    if ((st = rv_st_writer_meta(w, "format", EMBED_FORMAT)) != RV_OK ||
        (st = rv_st_writer_meta(w, "source", source)) != RV_OK ||
        (st = rv_st_writer_meta(w, "probe", o->probe_json ? o->probe_json : "null")) != RV_OK ||
        (st = rv_st_writer_meta(w, "model", s->model_name)) != RV_OK ||
        (st = rv_st_writer_meta(w, "model_hash", s->model_hash)) != RV_OK ||
        (st = rv_st_writer_meta(w, "config", s->config_json)) != RV_OK ||
        (st = rv_st_writer_meta(w, "family", rv_vit_family_name(s->model->cfg.family))) != RV_OK ||
        (st = rv_st_writer_meta(w, "random_weights", s->random_weights ? "true" : "false")) != RV_OK ||
        (st = meta_int(w, "cp", s->ranks)) != RV_OK ||
        (st = rv_st_writer_meta(w, "strategy", rv_cp_strategy_name(s->strategy))) != RV_OK ||
        (st = rv_st_writer_meta(w, "attention", attention)) != RV_OK ||
        (st = meta_num(w, "hop_s", s->hop_s > 0 ? s->hop_s : s->segment_s)) != RV_OK ||
        (st = rv_st_writer_meta(w, "causal", s->causal ? "true" : "false")) != RV_OK ||
        (st = rv_st_writer_meta(w, "fps", fps)) != RV_OK ||
        (st = meta_int(w, "size", L->ingest.size)) != RV_OK ||
        (st = meta_num(w, "segment_s", s->segment_s)) != RV_OK ||
        (st = meta_num(w, "recording_s", o->recording_s)) != RV_OK ||
        (st = meta_num(w, "time_origin", o->time_origin)) != RV_OK ||
        (st = meta_num(w, "start_s", o->start_s)) != RV_OK ||
        (st = meta_int(w, "tokens", S)) != RV_OK ||
        (st = meta_int(w, "video_tokens", p->modality_tokens[0])) != RV_OK ||
        (st = meta_int(w, "audio_tokens", p->modality_tokens[1])) != RV_OK ||
        (st = rv_st_writer_meta(w, "dtype", embed_output_dtype_name(s->dtype))) != RV_OK ||
        (st = rv_st_writer_meta(w, "normalize", s->normalize ? "l2" : "none")) != RV_OK ||
        (st = rv_st_writer_meta(w, "ringvit_version", RINGVIT_VERSION)) != RV_OK)
        goto end;
    if (out_is_stdout(o->path)) { /* -o -: in place, no temporary file */
        st = out_write_st(w, o->path);
        goto end;
    }
    /* Checked before the batch and again now (see out_path.h); a symlink is
     * written through to its target. */
    char target[4096];
    if ((st = out_target_path(o->path, target, sizeof target)) != RV_OK)
        goto end;
    /* rv_st_writer_write's temporary name, for the signal handler. */
    snprintf(embed_tmp_path, sizeof embed_tmp_path, "%s.tmp.%ld", target, (long)getpid());
    st = rv_st_writer_write(w, target);
    embed_tmp_path[0] = '\0';
end:
    rv_st_writer_free(&w);
    for (int i = 0; i < bufs.n; i++)
        free(bufs.owned[i]);
    spill_close(&tok_sp);
    free(source);
    return st;
}

int embed_output_complete(const char *path, const embed_settings *set)
{
    static const char *const always[] = {"global", "segments", "segment_start", "segment_end",
                                         "segment_tokens", "video_mean", "audio_mean", "pooled"};
    static const char *const per_token[] = {"tokens", "token_time", "token_modality",
                                            "token_pos"};
    if (access(path, F_OK) != 0)
        return 0;
    rv_safetensors *st = NULL;
    int ok = 0;
    if (rv_st_open(path, &st) != RV_OK)
        goto end;
    const char *fmt = rv_st_meta(st, "format");
    if (!fmt || strcmp(fmt, EMBED_FORMAT) != 0)
        goto end;
    /* An output of another model is not this run's: it is redone. */
    const char *hash = rv_st_meta(st, "model_hash");
    if (!hash || strcmp(hash, set->model_hash) != 0)
        goto end;
    for (size_t i = 0; i < sizeof always / sizeof always[0]; i++)
        if (!rv_st_find(st, always[i]))
            goto end;
    for (size_t i = 0; set->tokens && i < sizeof per_token / sizeof per_token[0]; i++)
        if (!rv_st_find(st, per_token[i]))
            goto end;
    if (set->model->cfg.cls && !rv_st_find(st, "cls"))
        goto end;
    /* Another --dtype or --normalize is another output (written before these
     * existed: f32, none). */
    const char *dtype = rv_st_meta(st, "dtype"), *norm = rv_st_meta(st, "normalize");
    if (strcmp(dtype ? dtype : "f32", embed_output_dtype_name(set->dtype)) != 0 ||
        strcmp(norm ? norm : "none", set->normalize ? "l2" : "none") != 0)
        goto end;
    const rv_st_tensor *g = rv_st_find(st, "global");
    ok = g->ndim == 1 && g->shape[0] == set->model->cfg.dim && g->dtype == set->dtype;
end:
    rv_st_free(&st);
    return ok;
}

int embed_output_info(const char *path, double *recording_s, int64_t *tokens)
{
    rv_safetensors *st = NULL;
    *recording_s = NAN;
    *tokens = -1;
    if (rv_st_open(path, &st) != RV_OK)
        return -1;
    const char *rs = rv_st_meta(st, "recording_s"), *tk = rv_st_meta(st, "tokens");
    char *end;
    if (rs) {
        double v = strtod(rs, &end);
        if (end != rs && !*end && isfinite(v))
            *recording_s = v;
    }
    if (tk) {
        long long v = strtoll(tk, &end, 10);
        if (end != tk && !*end && v >= 0)
            *tokens = v;
    }
    rv_st_free(&st);
    return 0;
}

/* "<name>.tmp.<digits>" -> name length and pid; 0 when not of that form. */
static size_t tmp_of(const char *entry, long *pid)
{
    const char *t = strstr(entry, ".safetensors.tmp.");
    if (!t)
        return 0;
    const char *d = t + strlen(".safetensors.tmp.");
    if (!*d)
        return 0;
    char *end;
    long v = strtol(d, &end, 10);
    if (*end || v <= 0)
        return 0;
    *pid = v;
    return (size_t)(t - entry) + strlen(".safetensors");
}

int embed_output_clean_stale(const embed_input *in, int n)
{
    if (n <= 0)
        return 0;
    /* Every output lives in one folder (-o's, or --out-dir). */
    const char *o0 = in[0].output, *slash = strrchr(o0, '/');
    char dir[4096];
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - o0) : 1, slash ? o0 : ".");
    if (slash == o0)
        snprintf(dir, sizeof dir, "/");
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        long pid = 0;
        size_t len = tmp_of(e->d_name, &pid);
        if (!len)
            continue;
        /* A live process may be writing it (another run, or a rank of this one). */
        if (pid == (long)getpid() || !(kill((pid_t)pid, 0) != 0 && errno == ESRCH))
            continue;
        for (int i = 0; i < n; i++) {
            const char *base = strrchr(in[i].output, '/');
            base = base ? base + 1 : in[i].output;
            if (strlen(base) == len && strncmp(base, e->d_name, len) == 0) {
                char full[8192];
                snprintf(full, sizeof full, "%s/%s", dir, e->d_name);
                if (unlink(full) == 0) {
                    removed++;
                    rv_log(RV_LOG_INFO, "embed: removed %s, left by a run that was stopped", full);
                }
                break;
            }
        }
    }
    closedir(d);
    return removed;
}
