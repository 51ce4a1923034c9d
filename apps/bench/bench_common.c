/* bench_common.c: the report and the flag takes of every bench, the sgemm
 * baseline of the compute benches and the synthetic token slices of the encoder
 * benches (bench_common.h). */
#include "bench_common.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "rv_clock.h"
#include "rv_tokens.h"

/* ---- the report ----------------------------------------------------------------------- */

void bench_report_init(bench_report *r, const char *bench, int json)
{
    *r = (bench_report){.json = json, .root = json_object()};
    bench_set(r, "bench", json_string(bench));
}

void bench_report_free(bench_report *r)
{
    json_decref(r->root);
    r->root = r->rows = NULL;
}

void bench_set(bench_report *r, const char *key, json_t *value)
{
    json_object_set_new(r->root, key, value);
}

void bench_note(bench_report *r, const char *fmt, ...)
{
    if (r->json)
        return;
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    fputs(n > 0 ? "# " : "#", stdout);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fputc('\n', stdout);
}

/* The heading conversion of a column: fmt's '-' flag and width, as %s. */
static void heading_fmt(const char *fmt, char *out, size_t size)
{
    const char *p = fmt + 1; /* past the '%' */
    int left = 0;
    for (; *p && strchr("-+ #0", *p); p++)
        left |= *p == '-';
    snprintf(out, size, "%%%s%ds", left ? "-" : "", atoi(p));
}

void bench_table(bench_report *r, const char *rows_key, const bench_col *cols,
                    int ncols)
{
    r->cols = cols, r->ncols = ncols, r->rows_key = rows_key, r->rows = NULL;
    if (r->json)
        return;
    fputc('#', stdout);
    for (int c = 0; c < ncols; c++) {
        if (!cols[c].title)
            continue;
        char h[16];
        heading_fmt(cols[c].fmt, h, sizeof h);
        fputc(' ', stdout);
        printf(h, cols[c].title);
    }
    fputc('\n', stdout);
}

static json_t *json_value(bench_type type, bench_val v)
{
    switch (type) {
    case RV_BENCH_INT:
        return json_integer((json_int_t)v.i);
    case RV_BENCH_REAL:
        return isfinite(v.f) ? json_real(v.f) : json_null();
    case RV_BENCH_TEXT:
        break;
    }
    return json_string(v.s);
}

void bench_add_row(bench_report *r, const bench_val *vals)
{
    json_t *obj = r->root;
    if (r->rows_key) {
        if (!r->rows) {
            r->rows = json_array();
            json_object_set_new(r->root, r->rows_key, r->rows);
        }
        obj = json_object();
        json_array_append_new(r->rows, obj);
    }
    if (!r->json)
        fputc(' ', stdout);
    for (int c = 0; c < r->ncols; c++) {
        const bench_col *col = &r->cols[c];
        if (col->key)
            json_object_set_new(obj, col->key, json_value(col->type, vals[c]));
        if (r->json || !col->title)
            continue;
        fputc(' ', stdout);
        if (col->type == RV_BENCH_INT)
            printf(col->fmt, vals[c].i);
        else if (col->type == RV_BENCH_REAL)
            printf(col->fmt, vals[c].f);
        else
            printf(col->fmt, vals[c].s);
    }
    if (!r->json)
        fputc('\n', stdout);
}

int bench_finish(bench_report *r, int ok, const char *fmt, ...)
{
    int rc = RV_EXIT_OK;
    if (r->rows_key && !r->rows)
        json_object_set_new(r->root, r->rows_key, json_array());
    bench_set(r, "ok", json_boolean(ok));
    if (r->json) {
        rc = cli_json_print(r->root);
    } else if (ok) {
        printf("# OK\n");
    } else {
        va_list ap;
        va_start(ap, fmt);
        fputs("# FAILED: ", stdout);
        vprintf(fmt, ap);
        fputc('\n', stdout);
        va_end(ap);
    }
    bench_report_free(r);
    return rc != RV_EXIT_OK ? rc : ok ? RV_EXIT_OK : RV_EXIT_FAIL;
}

/* ---- the flags ---------------------------------------------------------------------- */

int bench_take_strategy(const char *cmd, const char *name, const char *value, void *dst)
{
    (void)name;
    if (rv_cp_strategy_parse(value, dst) != RV_OK)
        return cli_usage_error(cmd, "%s", rv_last_error());
    return 0;
}

/* ---- the GEMM reference ------------------------------------------------------------- */

rv_status bench_gemm_rate(rv_backend *be, int n, int repeat, double *gflops)
{
    /* The reference is the f32 rate: a bf16 CPU backend measures on an f32 one. */
    if (rv_backend_is_host(be) && rv_backend_precision(be) == RV_PRECISION_BF16) {
        rv_backend *f32 = NULL;
        rv_status fst = rv_backend_cpu_create(be->threads, &f32);
        if (fst == RV_OK)
            fst = bench_gemm_rate(f32, n, repeat, gflops);
        rv_backend_free(&f32);
        return fst;
    }
    size_t nn = (size_t)n * n;
    float *h = malloc(sizeof(float) * nn), *a = NULL, *b = NULL, *c = NULL;
    rv_status st = RV_OK;
    if (!h) {
        st = rv_fail(RV_ERR_NOMEM, "gemm baseline: out of memory");
        goto end;
    }
    if ((st = be->alloc(be, sizeof(float) * nn, (void **)&a)) != RV_OK ||
        (st = be->alloc(be, sizeof(float) * nn, (void **)&b)) != RV_OK ||
        (st = be->alloc(be, sizeof(float) * nn, (void **)&c)) != RV_OK)
        goto end;
    for (size_t i = 0; i < nn; i++)
        h[i] = (float)((i * 7919) % 1000) * 1e-3f;
    if ((st = be->copy(be, a, h, sizeof(float) * nn, RV_COPY_HOST_TO_DEVICE)) != RV_OK)
        goto end;
    for (size_t i = 0; i < nn; i++)
        h[i] = (float)((i * 104729) % 1000) * 1e-3f;
    if ((st = be->copy(be, b, h, sizeof(float) * nn, RV_COPY_HOST_TO_DEVICE)) != RV_OK)
        goto end;
    double best = 1e30;
    for (int r = 0; r <= repeat; r++) { /* the first call warms up */
        double t0 = rv_clock_s();
        st = be->gemm(be, 0, 0, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        if (st == RV_OK)
            st = be->synchronize(be);
        double dt = rv_clock_s() - t0;
        if (st != RV_OK)
            goto end;
        if (r > 0 && dt < best)
            best = dt;
    }
    *gflops = 2.0 * n * n * (double)n / best * 1e-9;
end:
    free(h);
    if (a)
        be->free(be, a);
    if (b)
        be->free(be, b);
    if (c)
        be->free(be, c);
    return st;
}

rv_status bench_sgemm_rate(rv_backend *be, int repeat, double *gflops)
{
    return bench_gemm_rate(be, 2048, repeat, gflops);
}

int bench_gemm_size(const rv_backend *be)
{
    return rv_backend_is_host(be) ? 2048 : 8192;
}

const char *bench_cpu_kernels(void)
{
    const char *k = rv_cpu_kernels();
    return k ? k : "refused";
}

rv_status bench_backend_create(const char *device, int threads, rv_backend **be)
{
    *be = NULL;
    if (strcmp(device, "cpu") != 0 && strcmp(device, "cuda") != 0)
        return rv_fail(RV_ERR_INVALID, "unknown device '%s' (cpu or cuda)", device);
    return cli_backend_create(strcmp(device, "cuda") == 0, threads, 0, be);
}

void bench_span_seq_free(bench_span_seq *s)
{
    free(s->time);
    free(s->key);
    s->time = s->key = NULL;
}

rv_status bench_span_seq_make(double window, double block, double rate, int64_t seq,
                                 bench_span_seq *s)
{
    s->per = (int)(2.0 * rate + 0.5);
    s->per = s->per < 2 ? 2 : s->per;
    s->time = malloc(sizeof(double) * (size_t)(seq > 0 ? seq : 1));
    s->key = malloc(sizeof(double) * (size_t)(seq > 0 ? seq : 1));
    if (!s->time || !s->key) {
        bench_span_seq_free(s);
        return rv_fail(RV_ERR_NOMEM, "span keys for seq %lld: out of memory", (long long)seq);
    }
    const int nv = s->per * 2 / 3, na = s->per - nv;
    for (int64_t i = 0; i < seq; i++) {
        int64_t w = i / s->per;
        int r = (int)(i % s->per);
        s->time[i] = 2.0 * (double)w + (r < nv ? 0.5 * (4 * r / nv) : 2.0 * (r - nv) / na);
        s->key[i] = window > 0 ? s->time[i] : floor(s->time[i] / block);
    }
    s->reach = window > 0 ? window / 2 : 0.0;
    return RV_OK;
}

void bench_slice_free(bench_slice *s)
{
    free(s->mod), free(s->pos), free(s->time), free(s->window), free(s->video), free(s->audio);
    memset(s, 0, sizeof *s);
}

void bench_counts(const rv_vit_config *c, int64_t seq, int64_t *nvideo, int64_t *naudio)
{
    int64_t n = seq > c->cls ? seq - c->cls : 0;
    *nvideo = c->video ? n : 0;
    *naudio = c->video ? 0 : n;
}

/* Pseudo-random patch values of token g. */
static void fill_patch(float *v, size_t n, int64_t g)
{
    uint64_t x = 0x9E3779B97F4A7C15ull * (uint64_t)(g + 1);
    for (size_t e = 0; e < n; e++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        v[e] = (float)((x >> 40) & 0xFFFF) / 16384.0f - 2.0f;
    }
}

rv_status bench_slice_make(const rv_vit_config *c, const rv_shard_plan *p, int r,
                              const rv_span *span, bench_slice *s)
{
    memset(s, 0, sizeof *s);
    const int64_t len = rv_shard_len(p, r), cap = len > 0 ? len : 1;
    const size_t vdim = (size_t)c->tubelet * c->patch * c->patch * RV_VIT_CHANNELS;
    const size_t adim = (size_t)c->audio_freq * c->audio_time;
    const int per = RV_BENCH_GRID * RV_BENCH_GRID, bands = rv_vit_bands(c);
    const int video = c->video;
    s->mod = malloc((size_t)cap);
    s->pos = malloc(sizeof(int64_t) * 3 * (size_t)cap);
    s->time = malloc(sizeof(double) * 2 * (size_t)cap);
    s->video = malloc(sizeof(float) * (video ? vdim : 1) * (size_t)cap);
    s->audio = malloc(sizeof(float) * (video ? 1 : adim) * (size_t)cap);
    const int blocks = span && (span->kind == RV_SPAN_BLOCK || span->kind == RV_SPAN_FRAME);
    if (blocks)
        s->window = malloc(sizeof(int64_t) * (size_t)cap);
    if (!s->mod || !s->pos || !s->time || !s->video || !s->audio || (blocks && !s->window)) {
        bench_slice_free(s);
        return rv_fail(RV_ERR_NOMEM, "rank %d: out of memory for %lld tokens", r, (long long)len);
    }
    rv_shard_seg seg[RV_SHARD_MAX_SEGS];
    int n = rv_shard_segments(p, r, seg);
    int64_t k = 0, nv = 0, na = 0;
    for (int j = 0; j < n; j++)
        for (int64_t g = seg[j].start; g < seg[j].start + seg[j].len; g++, k++) {
            int64_t *ps = s->pos + 3 * k;
            double *ts = s->time + 2 * k;
            if (g < c->cls) {
                s->mod[k] = RV_MOD_CLS;
                ps[0] = g, ps[1] = ps[2] = 0;
                ts[0] = ts[1] = 0;
                continue;
            }
            int64_t i = g - c->cls;
            if (video) {
                int64_t tub = i / per, part = i % per;
                s->mod[k] = RV_MOD_VIDEO;
                ps[0] = tub, ps[1] = part / RV_BENCH_GRID, ps[2] = part % RV_BENCH_GRID;
                ts[0] = (double)tub * c->tubelet, ts[1] = ts[0] + c->tubelet;
                fill_patch(s->video + (size_t)nv++ * vdim, vdim, g);
            } else {
                int64_t step = i / bands;
                s->mod[k] = RV_MOD_AUDIO;
                ps[0] = step, ps[1] = i % bands, ps[2] = 0;
                ts[0] = (double)step * c->audio_tstride * 0.01;
                ts[1] = ts[0] + (c->audio_time - 1) * 0.01 + 0.025;
                fill_patch(s->audio + (size_t)na++ * adim, adim, g);
            }
            if (blocks)
                s->window[k] = span->kind == RV_SPAN_FRAME ? ps[0]
                                                          : (int64_t)floor(ts[0] / span->seconds);
        }
    if (blocks)
        for (int64_t i = 0; i < k; i++)
            if (s->mod[i] == RV_MOD_CLS)
                s->window[i] = 0;
    int64_t nva, naa;
    bench_counts(c, p->seq, &nva, &naa);
    s->t = (rv_vit_tokens){.len = len, .modality = s->mod, .pos = s->pos, .seq_time = s->time, .nvideo = nv, .video = s->video, .naudio = na, .audio = s->audio, .grid = RV_BENCH_GRID, .audio_steps = (naa + bands - 1) / bands, .window = s->window};
    return RV_OK;
}

int bench_model_open(const char *cmd, const bench_model_opts *o, model_cli *mc)
{
    int rc = model_cli_open(cmd, o->model ? o->model : o->preset, 0, 0, 0, 0, 1, mc);
    if (rc)
        return rc;
    if (rv_cp_strategy_check(o->strategy, mc->m->cfg.heads, o->cp) != RV_OK) {
        rc = cli_usage_error(cmd, "the model's heads and --cp: %s", rv_last_error());
        model_cli_close(mc);
    }
    return rc;
}

static int take_preset(const char *cmd, const char *name, const char *value, void *dst)
{
    (void)name;
    rv_vit_config c;
    if (rv_vit_preset(value, &c) != RV_OK)
        return cli_usage_error(cmd, "%s", rv_last_error());
    snprintf(dst, sizeof ((bench_model_opts *)0)->preset, "%s", value);
    return 0;
}

static int take_span(const char *cmd, const char *name, const char *value, void *dst)
{
    (void)name;
    if (rv_span_parse(value, dst) != RV_OK)
        return cli_usage_error(cmd, "%s", rv_last_error());
    return 0;
}

int bench_model_parse(const char *cmd, int argc, char **argv, int64_t seq,
                         bench_model_opts *o)
{
    *o = (bench_model_opts){.seq = seq, .cp = 1, .threads = rv_cpu_default_threads(), .repeat = 1,
                .strategy = RV_CP_RING};
    strcpy(o->preset, "tiny");
    const cli_flag flags[] = {
        {.name = "--strategy", .kind = RV_CLI_CUSTOM,
         .dst = &o->strategy, .take = bench_take_strategy},
        {.name = "--preset", .kind = RV_CLI_CUSTOM, .dst = o->preset, .take = take_preset},
        {.name = "--model", .kind = RV_CLI_TEXT, .dst = &o->model},
        {.name = "--seq", .kind = RV_CLI_I64, .dst = &o->seq, .lo = 1, .hi = 1 << 28},
        {.name = "--cp", .kind = RV_CLI_INT, .dst = &o->cp, .lo = 1, .hi = 1024},
        {.name = "--threads", .kind = RV_CLI_INT, .dst = &o->threads, .lo = 1, .hi = 4096},
        {.name = "--repeat", .kind = RV_CLI_INT, .dst = &o->repeat, .lo = 1, .hi = 100},
        {.name = "--attention", .kind = RV_CLI_CUSTOM, .dst = &o->span, .take = take_span},
        {.name = "--causal", .kind = RV_CLI_SWITCH, .dst = &o->causal},
        {.name = "--json", .kind = RV_CLI_SWITCH, .dst = &o->json},
        {.name = "--precision", .kind = RV_CLI_PRECISION, .dst = &o->precision},
    };
    int rc = cli_flags_parse(cmd, argc, argv, flags, RV_CLI_NFLAGS(flags), NULL);
    return rc ? rc : cli_check_precision(cmd, "cpu", o->precision);
}

void bench_model_report_init(bench_report *r, const char *bench,
                                const bench_model_opts *o, const rv_vit_config *cfg)
{
    const char *spec = o->model ? o->model : o->preset;
    const int tpr = o->threads / o->cp > 0 ? o->threads / o->cp : 1;
    char span_text[48];
    rv_span_format(&o->span, span_text, sizeof span_text);
    bench_report_init(r, bench, o->json);
    bench_set(r, "model", json_string(spec));
    bench_set(r, "family", json_string(rv_vit_family_name(cfg->family)));
    bench_set(r, "seq", json_integer(o->seq));
    bench_set(r, "cp", json_integer(o->cp));
    bench_set(r, "strategy", json_string(rv_cp_strategy_name(o->strategy)));
    bench_set(r, "causal", json_boolean(o->causal));
    bench_set(r, "attention", json_string(span_text));
    bench_set(r, "threads", json_integer(o->threads));
    bench_set(r, "threads_per_rank", json_integer(tpr));
    bench_set(r, "gemm", json_string(rv_gemm_library()));
    bench_set(r, "gemm_isa", json_string(rv_gemm_isa()));
    bench_set(r, "cpu_kernels", json_string(o->precision == RV_PRECISION_BF16
                                                ? rv_cpu_kernels_at(RV_PRECISION_BF16)
                                                : bench_cpu_kernels()));
    bench_set(r, "precision", json_string(o->precision == RV_PRECISION_BF16 ? "bf16" : "f32"));
    bench_note(r, "ringvit bench %s: model %s (%s, D %d, L %d, H %d), S=%lld%s, attention %s, "
                  "cp %d x %d thread(s), %s, %s, GEMM %s (%s), CPU kernels %s", bench, spec,
                  rv_vit_family_name(cfg->family), cfg->dim, cfg->layers, cfg->heads,
                  (long long)o->seq, o->causal ? " causal" : "", span_text, o->cp, tpr,
                  rv_cp_strategy_name(o->strategy),
                  o->precision == RV_PRECISION_BF16 ? "bf16" : "f32", rv_gemm_library(),
                  rv_gemm_isa(),
                  o->precision == RV_PRECISION_BF16 ? rv_cpu_kernels_at(RV_PRECISION_BF16)
                                                    : bench_cpu_kernels());
    bench_note(r, "%s", "");
}

json_t *bench_parts_json(const rv_vit_stats *s)
{
    return json_pack("{s:f, s:f, s:f, s:f, s:f, s:f}", "embed_s", s->embed_s, "attn_s", s->attn_s,
                     "attn_kernel_s", s->cp.busy_s, "attn_wait_s", s->cp.wait_s, "mlp_s",
                     s->mlp_s, "other_s", s->other_s);
}

void bench_parts_note(bench_report *r, const char *what, const rv_vit_stats *s)
{
    bench_note(r, "%s: embed %.3f, attention %.3f (kernels %.3f, wait %.3f), mlp %.3f, "
                  "other %.3f", what, s->embed_s, s->attn_s, s->cp.busy_s, s->cp.wait_s,
                  s->mlp_s, s->other_s);
}

rv_status bench_plan(const bench_model_opts *o, rv_shard_plan *plan)
{
    int zigzag = o->causal && o->span.kind == RV_SPAN_FULL;
    return rv_shard_plan_make(zigzag ? RV_SHARD_ZIGZAG : RV_SHARD_CONTIGUOUS, o->cp, o->seq, plan);
}
