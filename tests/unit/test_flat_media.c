/* test_flat_media.c: the flat calls on generated media against the library's
 * own passes: the reader's chunks against rv_ingest_stream (times on the
 * container's clock, t0 + the grid's: an MPEG-TS file whose video starts
 * after 1.4 s of audio too), the tokens against rv_tokenize_file (likewise), the embedding (2 ranks) against a plain one-rank
 * forward pooled here in double; errors on missing and corrupt files; an
 * interrupt; two readers on two threads at once. */
#include <criterion/criterion.h>

#include <pthread.h>

#include "ingest_media.h"
#include "rv_flat.h"
#include "rv_tok_slice.h"
#include "rv_tokenize.h"
#include "rv_vit.h"

/* The flat call's global embedding (cp 2, pooled in f32 by the library) against a
 * one-rank forward pooled here in double: normalised error (max |got - want| /
 * max |want|). Ring attention over 2 ranks rounds each layer's attention apart
 * from one rank's by sqrt(S) * eps (f32 epsilon 1.2e-7, S a few hundred tokens),
 * about 2e-6, carried through the tiny model's layers; the f32 mean over the
 * tokens adds sqrt(S) * eps more. */
#define TOL_GLOBAL 1e-5

const media_recipe rv_test_media[] = {
    {"av.mp4", "-f lavfi -i testsrc2=size=64x48:rate=30 -f lavfi -i "
               "anoisesrc=sample_rate=44100:amplitude=0.3:seed=7 -t 4 -c:v libx264 -g 30 "
               "-pix_fmt yuv420p -c:a aac", NULL},
    {"b.mp4", "-f lavfi -i testsrc2=size=80x60:rate=25 -t 3 -c:v libx264 -pix_fmt yuv420p", NULL},
    /* audio from 0, video from about 1.4 s (tests/cli/test_timeline.sh's file) */
    {"pre.ts", "-f lavfi -i sine=frequency=440:sample_rate=44100:duration=5 -itsoffset 1.4 "
               "-f lavfi -i testsrc2=size=64x64:rate=25:duration=3 -map 1:v -map 0:a "
               "-c:v mpeg2video -bf 0 -c:a mp2 -muxdelay 0 -muxpreload 0 -f mpegts", NULL},
    {NULL, NULL, NULL},
};

/* ---- reader ---- */

typedef struct whole {
    int64_t nframes, nsamples, size;
    uint8_t *frames;
    double *t, *src;
    float *audio;
} whole;

static rv_status on_chunk(const rv_ingest_chunk *c, void *user)
{
    whole *w = user;
    size_t fb = (size_t)c->size * c->size * 3;
    w->size = c->size;
    w->frames = realloc(w->frames, fb * (size_t)(w->nframes + c->nframes) + 1);
    w->t = realloc(w->t, sizeof(double) * (size_t)(w->nframes + c->nframes + 1));
    w->src = realloc(w->src, sizeof(double) * (size_t)(w->nframes + c->nframes + 1));
    w->audio = realloc(w->audio, sizeof(float) * (size_t)(w->nsamples + c->nsamples + 1));
    if (c->nframes > 0) { /* an audio-only or empty chunk has NULL pointers */
        memcpy(w->frames + fb * (size_t)w->nframes, c->frames, fb * (size_t)c->nframes);
        memcpy(w->t + w->nframes, c->frame_time, sizeof(double) * (size_t)c->nframes);
        memcpy(w->src + w->nframes, c->source_time, sizeof(double) * (size_t)c->nframes);
    }
    if (c->nsamples > 0)
        memcpy(w->audio + w->nsamples, c->audio, sizeof(float) * (size_t)c->nsamples);
    w->nframes += c->nframes;
    w->nsamples += c->nsamples;
    return RV_OK;
}

static void whole_free(whole *w)
{
    free(w->frames), free(w->t), free(w->src), free(w->audio);
}

/* Every chunk of the reader, appended. */
static rv_status read_all(const char *path, const char *opts, whole *w)
{
    rv_flat_reader *r = NULL;
    rv_status st = rv_flat_reader_open(path, opts, &r);
    memset(w, 0, sizeof *w);
    while (st == RV_OK) {
        rv_arrays *a = NULL;
        if ((st = rv_flat_reader_next(r, &a)) != RV_OK || !a)
            break;
        int fi = rv_arrays_find(a, "frames"), ai = rv_arrays_find(a, "audio");
        rv_ingest_chunk c = {.nframes = (int)rv_arrays_dim(a, fi, 0),
                             .size = (int)rv_arrays_dim(a, fi, 1),
                             .frames = rv_arrays_data(a, fi),
                             .frame_time = rv_arrays_data(a, rv_arrays_find(a, "frame_time")),
                             .source_time = rv_arrays_data(a, rv_arrays_find(a, "frame_source_time")),
                             .nsamples = rv_arrays_dim(a, ai, 0),
                             .audio = rv_arrays_data(a, ai)};
        on_chunk(&c, w);
        rv_arrays_free(&a);
    }
    rv_flat_reader_close(&r);
    return st;
}

static void check_reader(const char *path, int fps, int size, double start)
{
    char opts[256];
    int n = snprintf(opts, sizeof opts, "{\"fps\": %d, \"size\": %d, \"chunk_frames\": 5", fps,
                     size);
    snprintf(opts + n, sizeof opts - (size_t)n, start >= 0 ? ", \"start\": %.3f}" : "}", start);
    whole got, ref = {0};
    cr_assert_eq(read_all(path, opts, &got), RV_OK, "%s", rv_last_error());
    rv_ingest_opts o = opts_fps(fps, 1, size);
    rv_timeline tl;
    cr_assert_eq(rv_ingest_timeline(path, &o, &tl), RV_OK);
    o.start_s = rv_timeline_start(&tl, start >= 0 ? start : NAN);
    cr_assert_eq(rv_ingest_stream(path, &o, on_chunk, &ref, NULL), RV_OK);
    cr_assert_eq(got.nframes, ref.nframes);
    cr_assert_eq(got.nsamples, ref.nsamples);
    cr_assert(ref.nframes > 0);
    cr_assert_eq(memcmp(got.frames, ref.frames, (size_t)(ref.nframes * size * size * 3)), 0);
    cr_assert_eq(memcmp(got.audio, ref.audio, sizeof(float) * (size_t)ref.nsamples), 0);
    for (int64_t i = 0; i < ref.nframes; i++) {
        cr_assert_eq(got.t[i], ref.t[i]);
        cr_assert_eq(got.src[i], ref.src[i]);
        cr_assert_eq(got.t[i], tl.t0 + rv_ingest_frame_time(&o, i), "frame %lld", (long long)i);
    }
    whole_free(&got);
    whole_free(&ref);
}

Test(flat_media, reader_equals_the_ingest)
{
    char *p = media("av.mp4");
    check_reader(p, 3, 32, -1);
    check_reader(p, 2, 16, 1.5);
    free(p);
    p = media("pre.ts");
    check_reader(p, 5, 32, -1);
    check_reader(p, 2, 16, 1.0); /* before the first frame, after the first audio */
    free(p);
}

typedef struct two {
    const char *path;
    whole w;
    rv_status st;
} two;

static void *reader_thread(void *arg)
{
    two *t = arg;
    t->st = read_all(t->path, "{\"fps\": 5, \"size\": 24, \"chunk_frames\": 2}", &t->w);
    return NULL;
}

Test(flat_media, two_readers_on_two_threads)
{
    two t[2] = {{.path = media("av.mp4")}, {.path = media("b.mp4")}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        cr_assert_eq(pthread_create(&th[i], NULL, reader_thread, &t[i]), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 2; i++) {
        whole one;
        cr_assert_eq(t[i].st, RV_OK);
        cr_assert_eq(read_all(t[i].path, "{\"fps\": 5, \"size\": 24}", &one), RV_OK);
        cr_assert_eq(one.nframes, t[i].w.nframes);
        cr_assert_eq(one.nsamples, t[i].w.nsamples);
        cr_assert_eq(memcmp(one.frames, t[i].w.frames, (size_t)one.nframes * 24 * 24 * 3), 0);
        whole_free(&one);
        whole_free(&t[i].w);
        free((char *)t[i].path);
    }
}

Test(flat_media, interrupt_stops_a_reader_and_spares_the_next)
{
    char *p = media("av.mp4");
    rv_flat_reader *r = NULL;
    cr_assert_eq(rv_flat_reader_open(p, "{\"fps\": 10, \"size\": 16, \"chunk_frames\": 1}", &r), RV_OK);
    rv_flat_interrupt();
    rv_status st = RV_OK;
    int chunks = 0;
    for (rv_arrays *a = NULL; st == RV_OK; chunks++) {
        st = rv_flat_reader_next(r, &a);
        if (!a)
            break;
        rv_arrays_free(&a);
    }
    cr_assert_eq(st, RV_ERR_IO);
    cr_assert_str_eq(rv_last_error(), "interrupted");
    cr_assert(chunks < 5, "%d chunks after the interrupt", chunks);
    rv_flat_reader_close(&r);
    whole w;
    cr_assert_eq(read_all(p, "{\"fps\": 10, \"size\": 16}", &w), RV_OK);
    cr_assert_eq(w.nframes, 40);
    whole_free(&w);
    /* closing early, with chunks still coming, stops the producer */
    cr_assert_eq(rv_flat_reader_open(p, "{\"fps\": 10, \"size\": 16, \"chunk_frames\": 1}", &r), RV_OK);
    rv_flat_reader_close(&r);
    free(p);
}

Test(flat_media, errors_name_the_file)
{
    char *j = NULL, bad[600];
    rv_flat_reader *r = NULL;
    cr_assert_neq(rv_flat_probe("/nonexistent/x.mp4", &j), RV_OK);
    cr_assert(strstr(rv_last_error(), "/nonexistent/x.mp4"), "%s", rv_last_error());
    snprintf(bad, sizeof bad, "%s/garbage.mp4", media_dir());
    FILE *f = fopen(bad, "wb");
    cr_assert_not_null(f);
    for (int i = 0; i < 5000; i++)
        fputc((i * 7919) & 0xff, f);
    fclose(f);
    cr_assert_neq(rv_flat_reader_open(bad, NULL, &r), RV_OK);
    cr_assert(strstr(rv_last_error(), "garbage.mp4"), "%s", rv_last_error());
    cr_assert_null(r);
}

/* ---- tokens ---- */

typedef struct toks {
    int64_t n, nv, vd;
    uint8_t *mod;
    double *time;
    float *video;
    double t0;      /* the grid's zero on the container's clock */
} toks;

static rv_status on_batch(const rv_tok_batch *b, void *user)
{
    toks *t = user;
    t->mod = realloc(t->mod, (size_t)(t->n + b->count + 1));
    t->time = realloc(t->time, sizeof(double) * 2 * (size_t)(t->n + b->count + 1));
    t->video = realloc(t->video, sizeof(float) * (size_t)((t->nv + b->nvideo) * t->vd + 1));
    if (b->count > 0)
        memcpy(t->mod + t->n, b->modality, (size_t)b->count);
    for (int64_t i = 0; i < 2 * b->count; i++) {
        cr_assert_eq(b->time[i], t->t0 + b->seq_time[i]);
        t->time[2 * t->n + i] = b->time[i];
    }
    if (b->nvideo > 0)
        memcpy(t->video + t->nv * t->vd, b->video, sizeof(float) * (size_t)(b->nvideo * t->vd));
    t->n += b->count;
    t->nv += b->nvideo;
    return RV_OK;
}

static void check_tokens(const char *p)
{
    rv_arrays *a = NULL;
    cr_assert_eq(rv_flat_tokens(p, "{\"fps\": 4, \"size\": 32, \"patch\": 8, \"cls\": true}", &a),
                 RV_OK, "%s", rv_last_error());
    rv_ingest_opts io = opts_fps(4, 1, 32);
    rv_tok_opts to;
    rv_tok_opts_default(&to);
    to.patch = 8;
    to.cls = 1;
    rv_timeline tl;
    cr_assert_eq(rv_ingest_timeline(p, &io, &tl), RV_OK);
    io.start_s = rv_timeline_start(&tl, NAN);
    rv_tok_layout shape;
    cr_assert_eq(rv_tok_layout_make(&to, &io, 0, 0, &shape), RV_OK);
    toks ref = {.vd = shape.video_dim, .t0 = tl.t0};
    cr_assert_eq(rv_tokenize_file(p, &io, &to, on_batch, &ref, NULL), RV_OK);
    int mi = rv_arrays_find(a, "token_modality"), ti = rv_arrays_find(a, "token_time"),
        vi = rv_arrays_find(a, "video_patches");
    cr_assert_eq(rv_arrays_dim(a, mi, 0), ref.n);
    cr_assert_eq(rv_arrays_dim(a, vi, 0), ref.nv);
    cr_assert_eq(rv_arrays_dim(a, vi, 1), ref.vd);
    cr_assert_eq(memcmp(rv_arrays_data(a, mi), ref.mod, (size_t)ref.n), 0);
    cr_assert_eq(memcmp(rv_arrays_data(a, ti), ref.time, sizeof(double) * 2 * (size_t)ref.n), 0);
    cr_assert_eq(memcmp(rv_arrays_data(a, vi), ref.video, sizeof(float) * (size_t)(ref.nv * ref.vd)), 0);
    cr_assert_eq(((const uint8_t *)rv_arrays_data(a, mi))[0], RV_MOD_CLS);
    rv_arrays_free(&a);
    free(ref.mod), free(ref.time), free(ref.video);
}

Test(flat_media, tokens_equal_the_tokenizer)
{
    char *p = media("av.mp4");
    check_tokens(p);
    free(p);
    p = media("pre.ts");
    check_tokens(p);
    free(p);
}

/* ---- embed ---- */

typedef struct one_rank {
    const rv_vit_model *m;
    const char *path;
    rv_tok_recording rec;
    double *mean;   /* (D) the naive pooled global: every non-CLS token's output */
} one_rank;

static rv_status one_rank_main(rv_comm *comm, void *arg)
{
    one_rank *j = arg;
    const int D = j->m->cfg.dim;
    rv_tok_slice s = {0};
    rv_backend *be = NULL;
    float *y = NULL;
    rv_status st;
    if ((st = rv_tok_slice_plan(&j->rec.layout, RV_SHARD_CONTIGUOUS, 1, 0, 1, &s)) != RV_OK ||
        (st = rv_tok_slice_fill(j->path, &j->rec.layout, &s, NULL, NULL, NULL)) != RV_OK ||
        (st = rv_backend_create("cpu", 1, -1, &be)) != RV_OK)
        goto end;
    y = malloc(sizeof(float) * (size_t)(s.len + 1) * (size_t)D);
    rv_vit_tokens tok = rv_vit_slice_tokens(&j->rec.layout, &s);
    rv_vit_run run = {.be = be, .comm = comm, .plan = s.plan, .strategy = RV_CP_RING};
    if ((st = rv_vit_forward(j->m, &run, &tok, y, NULL)) != RV_OK)
        goto end;
    int64_t n = 0;
    for (int64_t i = 0; i < s.len; i++) {
        if (s.modality[i] == RV_MOD_CLS)
            continue;
        for (int d = 0; d < D; d++)
            j->mean[d] += y[i * D + d];
        n++;
    }
    for (int d = 0; d < D; d++)
        j->mean[d] /= (double)n;
end:
    free(y);
    rv_backend_free(&be);
    rv_tok_slice_release(&s);
    return st;
}

Test(flat_media, embed_on_two_ranks_equals_one_plain_forward)
{
    char *p = media("av.mp4");
    rv_flat_encoder *e = NULL;
    rv_arrays *a = NULL, *t = NULL, *b = NULL;
    cr_assert_eq(rv_flat_encoder_open("tiny", "{\"cp\": 2, \"threads\": 2}", &e), RV_OK, "%s",
                 rv_last_error());
    cr_assert_eq(rv_flat_encoder_embed(e, p, "{\"fps\": 2, \"size\": 64}", &a), RV_OK, "%s",
                 rv_last_error());
    /* the reference: the model's own recipe on one rank, pooled here */
    rv_vit_model *m = NULL;
    rv_ingest_opts io;
    rv_tok_opts to;
    rv_ingest_opts_default(&io);
    io.fps_num = 2;
    rv_vit_config cfg;
    cr_assert_eq(rv_vit_preset("tiny", &cfg), RV_OK);
    cr_assert_eq(rv_vit_new(&cfg, &m), RV_OK);
    cr_assert_eq(rv_vit_init_random(m, 0), RV_OK);
    cr_assert_eq(rv_vit_input_opts(&m->cfg, 64, 0, 0, NULL, &to, &io), RV_OK);
    one_rank j = {.m = m, .path = p, .mean = calloc((size_t)cfg.dim, sizeof(double))};
    cr_assert_eq(rv_tok_recording_plan(p, &to, &io, NAN, &j.rec, NULL), RV_OK);
    cr_assert_eq(rv_local_run(1, one_rank_main, &j), RV_OK, "%s", rv_last_error());
    int gi = rv_arrays_find(a, "global");
    cr_assert_eq(rv_arrays_dim(a, gi, 0), cfg.dim);
    const float *g = rv_arrays_data(a, gi);
    double worst = 0, big = 1e-30;
    int worst_d = 0;
    for (int d = 0; d < cfg.dim; d++) {
        if (!(fabs(g[d] - j.mean[d]) <= worst))
            worst = fabs(g[d] - j.mean[d]), worst_d = d;
        big = fmax(big, fabs(j.mean[d]));
    }
    printf("flat_media: global (cp 2) vs one rank pooled in double: normalised error %.3g\n",
           worst / big);
    cr_assert_leq(worst / big, TOL_GLOBAL, "global: normalised error %.3g (worst global[%d] %g vs "
                  "%g)", worst / big, worst_d, g[worst_d], j.mean[worst_d]);
    /* from the tokens rv_flat_tokens made for the model: the same outputs */
    cr_assert_eq(rv_flat_tokens(p, "{\"fps\": 2, \"size\": 64, \"model\": \"tiny\"}", &t), RV_OK,
                 "%s", rv_last_error());
    cr_assert_eq(rv_flat_encoder_embed_tokens(e, t, NULL, &b), RV_OK, "%s", rv_last_error());
    cr_assert_eq(memcmp(rv_arrays_data(b, rv_arrays_find(b, "global")), g, sizeof(float) * cfg.dim), 0);
    /* tokens of another tokenizer are refused */
    rv_arrays_free(&t);
    cr_assert_eq(rv_flat_tokens(p, "{\"fps\": 2, \"size\": 64, \"patch\": 8}", &t), RV_OK);
    rv_arrays_free(&b);
    cr_assert_eq(rv_flat_encoder_embed_tokens(e, t, NULL, &b), RV_ERR_INVALID);
    cr_assert_null(b);
    rv_arrays_free(&t);
    rv_arrays_free(&a);
    rv_flat_encoder_close(&e);
    rv_vit_free(&m);
    free(j.mean);
    free(p);
}
