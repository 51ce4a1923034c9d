/* bench_common.c: the sgemm baseline of the compute benches and the synthetic
 * token slices of the encoder benches (bench_common.h). */
#include "bench_common.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "rv_tokens.h"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

rv_status rv_bench_gemm_rate(rv_backend *be, int n, int repeat, double *gflops)
{
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
        double t0 = now_s();
        st = be->gemm(be, 0, 0, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        if (st == RV_OK)
            st = be->synchronize(be);
        double dt = now_s() - t0;
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

rv_status rv_bench_sgemm_rate(rv_backend *be, int repeat, double *gflops)
{
    return rv_bench_gemm_rate(be, 2048, repeat, gflops);
}

int rv_bench_gemm_size(const rv_backend *be)
{
    return rv_backend_is_host(be) ? 2048 : 8192;
}

const char *rv_bench_cpu_kernels(void)
{
    const char *k = rv_cpu_kernels();
    return k ? k : "refused";
}

rv_status rv_bench_backend_create(const char *device, int threads, rv_backend **be)
{
    *be = NULL;
    if (strcmp(device, "cpu") != 0 && strcmp(device, "cuda") != 0)
        return rv_fail(RV_ERR_INVALID, "unknown device '%s' (cpu or cuda)", device);
    return rv_cli_backend_create(strcmp(device, "cuda") == 0, threads, 0, be);
}

void rv_bench_span_seq_free(rv_bench_span_seq *s)
{
    free(s->time);
    free(s->key);
    s->time = s->key = NULL;
}

rv_status rv_bench_span_seq_make(double window, double block, double rate, int64_t seq,
                                 rv_bench_span_seq *s)
{
    s->per = (int)(2.0 * rate + 0.5);
    s->per = s->per < 2 ? 2 : s->per;
    s->time = malloc(sizeof(double) * (size_t)(seq > 0 ? seq : 1));
    s->key = malloc(sizeof(double) * (size_t)(seq > 0 ? seq : 1));
    if (!s->time || !s->key) {
        rv_bench_span_seq_free(s);
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

int rv_bench_span_flag(const char *cmd, int argc, char **argv, int *i, double *window,
                       double *block, double *rate, int *rc)
{
    const char *a = argv[*i];
    if (rv_cli_flag_is(a, "--window"))
        *rc = rv_cli_take_double(cmd, argc, argv, i, 1e-6, 1e6, window);
    else if (rv_cli_flag_is(a, "--block"))
        *rc = rv_cli_take_double(cmd, argc, argv, i, 1e-6, 1e6, block);
    else if (rv_cli_flag_is(a, "--rate"))
        *rc = rv_cli_take_double(cmd, argc, argv, i, 1.0, 1e6, rate);
    else
        return 0;
    return 1;
}

void rv_bench_slice_free(rv_bench_slice *s)
{
    free(s->mod), free(s->pos), free(s->time), free(s->window), free(s->video), free(s->audio);
    memset(s, 0, sizeof *s);
}

void rv_bench_counts(const rv_vit_config *c, int64_t seq, int64_t *nvideo, int64_t *naudio)
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

rv_status rv_bench_slice_make(const rv_vit_config *c, const rv_shard_plan *p, int r,
                              const rv_span *span, rv_bench_slice *s)
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
        rv_bench_slice_free(s);
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
    rv_bench_counts(c, p->seq, &nva, &naa);
    s->t = (rv_vit_tokens){.len = len, .modality = s->mod, .pos = s->pos, .time = s->time, .nvideo = nv, .video = s->video, .naudio = na, .audio = s->audio, .grid = RV_BENCH_GRID, .audio_steps = (naa + bands - 1) / bands, .window = s->window};
    return RV_OK;
}

int rv_bench_model_open(const char *cmd, const rv_bench_model_opts *o, model_cli *mc)
{
    int rc = model_cli_open(cmd, o->model ? o->model : o->preset, 0, 0, 0, 0, 1, mc);
    if (rc)
        return rc;
    if (o->strategy == RV_CP_ULYSSES && mc->m->cfg.heads % o->cp != 0) {
        rc = rv_cli_usage_error(cmd, "ulysses needs the model's %d heads to be a multiple of "
                                "--cp (%d)", mc->m->cfg.heads, o->cp);
        model_cli_close(mc);
    }
    return rc;
}

int rv_bench_model_parse(const char *cmd, int argc, char **argv, int64_t seq,
                         rv_bench_model_opts *o)
{
    *o = (rv_bench_model_opts){.seq = seq, .cp = 1, .threads = rv_cpu_default_threads(), .repeat = 1,
                .strategy = RV_CP_RING};
    strcpy(o->preset, "tiny");
    int rc = 0;
    for (int i = 1; i < argc && !rc; i++) {
        const char *a = argv[i];
        if (rv_cli_flag_is(a, "--strategy")) {
            const char *v = rv_cli_flag_value(cmd, argc, argv, &i);
            if (!v)
                return RV_EXIT_USAGE;
            if (rv_cp_strategy_parse(v, &o->strategy) != RV_OK)
                return rv_cli_usage_error(cmd, "%s", rv_last_error());
        } else if (rv_cli_flag_is(a, "--preset")) {
            const char *v = rv_cli_flag_value(cmd, argc, argv, &i);
            if (!v)
                return RV_EXIT_USAGE;
            rv_vit_config c;
            if (rv_vit_preset(v, &c) != RV_OK)
                return rv_cli_usage_error(cmd, "%s", rv_last_error());
            snprintf(o->preset, sizeof o->preset, "%s", v);
        } else if (rv_cli_flag_is(a, "--model")) {
            if (!(o->model = rv_cli_flag_value(cmd, argc, argv, &i)))
                return RV_EXIT_USAGE;
        } else if (rv_cli_flag_is(a, "--seq")) {
            rc = rv_cli_take_i64(cmd, argc, argv, &i, 1, (int64_t)1 << 28, &o->seq);
        } else if (rv_cli_flag_is(a, "--cp")) {
            rc = rv_cli_take_int(cmd, argc, argv, &i, 1, 1024, &o->cp);
        } else if (rv_cli_flag_is(a, "--threads")) {
            rc = rv_cli_take_int(cmd, argc, argv, &i, 1, 4096, &o->threads);
        } else if (rv_cli_flag_is(a, "--repeat")) {
            rc = rv_cli_take_int(cmd, argc, argv, &i, 1, 100, &o->repeat);
        } else if (rv_cli_flag_is(a, "--attention")) {
            const char *v = rv_cli_flag_value(cmd, argc, argv, &i);
            if (!v)
                return RV_EXIT_USAGE;
            if (rv_span_parse(v, &o->span) != RV_OK)
                return rv_cli_usage_error(cmd, "%s", rv_last_error());
        } else if (strcmp(a, "--causal") == 0) {
            o->causal = 1;
        } else if (strcmp(a, "--json") == 0) {
            o->json = 1;
        } else {
            return rv_cli_unknown_arg(cmd, a);
        }
    }
    return rc;
}

rv_status rv_bench_plan(const rv_bench_model_opts *o, rv_shard_plan *plan)
{
    int zigzag = o->causal && o->span.kind == RV_SPAN_FULL;
    return rv_shard_plan_make(zigzag ? RV_SHARD_ZIGZAG : RV_SHARD_CONTIGUOUS, o->cp, o->seq, plan);
}
