/* test_vit_block_steps.c: AST's learned position grid under attention blocks
 * (rv_vit_tokens.layout). With windows cut from the recording (block spans:
 * window_positions) every block has its own audio time steps, a short last
 * block fewer, and its tokens' grid positions are resampled to that count,
 * as the block embedded alone has them. A tiny AST-family model (D 32, 12
 * bands x 8 stored steps, class and distillation tokens) over 2.5 s of audio in
 * 1 s blocks: 9, 9 and 4 steps (the first two resampled from the stored 8, the
 * last read from the stored columns as they are):
 *   - the embedding of the whole sequence equals, row for row and bit for bit,
 *     each block's embedded as a sequence of its own (audio_steps its own, no
 *     layout); without the layout (every block at the longest block's 9) the
 *     last block's differs, the first two's do not;
 *   - the forward under block attention at cp 1 and cp 3 (ring) equals each
 *     block's own forward (full attention) within 1e-5, and the backward's
 *     gradients (every weight) are the sum of the blocks' own within 1e-5. */
#include <criterion/criterion.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref_ops.h"
#include "rv_comm.h"
#include "rv_tokens.h"
#include "rv_vit.h"
#include "rv_vit_train.h"
#include "vit_slice.h"

#define D 32

static rv_vit_config ast_config(void)
{
    rv_vit_config c;
    cr_assert_eq(rv_vit_preset("tiny", &c), RV_OK, "%s", rv_last_error());
    c.dim = D, c.layers = 2, c.heads = 2, c.mlp = 64;
    rv_vit_family_defaults(&c);
    snprintf(c.preset, sizeof c.preset, "ast");
    c.family = RV_FAMILY_AST, c.video = 0, c.audio = 1, c.cls = 2;
    c.audio_freq = 16, c.audio_time = 16, c.audio_fstride = 10, c.audio_tstride = 10;
    c.audio_pos = RV_APOS_GRID, c.audio_grid_t = 8, c.pool = RV_POOL_CLS_DIST;
    c.pos = RV_POS_NONE, c.time_code = 0;
    cr_assert_eq(rv_vit_config_check(&c), RV_OK, "%s", rv_last_error());
    return c;
}

static rv_vit_model *ast_model(const rv_vit_config *c)
{
    rv_vit_model *m = NULL;
    cr_assert_eq(rv_vit_new(c, &m), RV_OK, "%s", rv_last_error());
    ref_rng r = ref_rng_make(77);
    ref_fill_uniform(&r, m->arena, m->arena_floats, -0.3f, 0.3f);
    for (int l = 0; l < c->layers; l++) {
        ref_fill_uniform(&r, m->layer[l].ln1_w, (size_t)c->dim, 0.8f, 1.2f);
        ref_fill_uniform(&r, m->layer[l].ln2_w, (size_t)c->dim, 0.8f, 1.2f);
    }
    ref_fill_uniform(&r, m->ln_w, (size_t)c->dim, 0.8f, 1.2f);
    return m;
}

/* The tokens of a layout, as the tokenizer hands them out, with random patches. */
typedef struct seq {
    rv_tok_layout L;
    rv_vit_tokens all;
    uint8_t *mod;
    int64_t *pos, *window, *patch_of;
    double *time;
    float *audio;
} seq;

static void seq_make(const rv_vit_config *c, seq *s)
{
    rv_tok_opts to;
    rv_ingest_opts io;
    rv_vit_tok_opts(c, &to);
    rv_ingest_opts_default(&io);
    io.size = to.patch;
    io.video_stream = -2;
    to.video = 0;
    to.window_s = 1.0;
    to.cls_each_window = to.window_positions = 1; /* what block=1 gives */
    cr_assert_eq(rv_tok_layout_make(&to, &io, 0, 40000, &s->L), RV_OK, "%s", rv_last_error());
    const rv_tok_layout *L = &s->L;
    const int64_t S = L->seq;
    s->mod = malloc((size_t)S);
    s->pos = malloc(sizeof(int64_t) * 3 * (size_t)S);
    s->window = malloc(sizeof(int64_t) * (size_t)S);
    s->patch_of = malloc(sizeof(int64_t) * (size_t)S);
    s->time = malloc(sizeof(double) * 2 * (size_t)S);
    s->audio = ref_alloc_f((size_t)(L->naudio * L->audio_dim));
    cr_assert(s->mod && s->pos && s->window && s->patch_of && s->time);
    ref_rng r = ref_rng_make(78);
    ref_fill_uniform(&r, s->audio, (size_t)(L->naudio * L->audio_dim), -1.0f, 1.0f);
    int64_t na = 0;
    for (int64_t i = 0; i < S; i++) {
        rv_token tk;
        cr_assert_eq(rv_tok_info(L, i, &tk), RV_OK);
        s->mod[i] = (uint8_t)tk.modality;
        memcpy(s->pos + 3 * i, tk.pos, sizeof tk.pos);
        memcpy(s->time + 2 * i, tk.seq_time, sizeof tk.seq_time);
        s->window[i] = tk.window;
        s->patch_of[i] = tk.modality == RV_MOD_AUDIO ? na++ : -1;
    }
    s->all = (rv_vit_tokens){.len = S, .modality = s->mod, .pos = s->pos, .seq_time = s->time,
                             .naudio = na, .audio = s->audio, .grid = 1,
                             .audio_steps = rv_vit_audio_steps(L), .window = s->window,
                             .layout = L};
}

static void seq_free(seq *s)
{
    free(s->mod), free(s->pos), free(s->window), free(s->patch_of), free(s->time), free(s->audio);
    memset(s, 0, sizeof *s);
}

/* Block w's tokens as a sequence of their own: its own steps, no layout. */
static rv_vit_tokens block_tokens(const seq *s, int64_t w)
{
    const int64_t a = rv_tok_window_start(&s->L, w), b = rv_tok_window_start(&s->L, w + 1);
    int64_t na = 0, skip = 0;
    for (int64_t i = 0; i < a; i++)
        skip += s->mod[i] == RV_MOD_AUDIO;
    for (int64_t i = a; i < b; i++)
        na += s->mod[i] == RV_MOD_AUDIO;
    return (rv_vit_tokens){.len = b - a, .modality = s->mod + a, .pos = s->pos + 3 * a,
                           .seq_time = s->time + 2 * a, .naudio = na,
                           .audio = s->audio + skip * s->L.audio_dim, .grid = 1,
                           .audio_steps = rv_vit_window_audio_steps(&s->L, w)};
}

Test(vit_block_steps, each_block_embeds_as_on_its_own)
{
    rv_vit_config c = ast_config();
    rv_vit_model *m = ast_model(&c);
    seq s;
    seq_make(&c, &s);
    cr_assert_eq(s.L.windows, 3);
    const int64_t steps[3] = {9, 9, 4};
    for (int w = 0; w < 3; w++)
        cr_assert_eq(rv_vit_window_audio_steps(&s.L, w), steps[w], "block %d: %lld steps", w,
                     (long long)rv_vit_window_audio_steps(&s.L, w));
    cr_assert_eq(s.all.audio_steps, 9);
    rv_backend *be = NULL;
    cr_assert_eq(rv_backend_cpu_create(1, &be), RV_OK);
    float *x = ref_alloc_f((size_t)s.all.len * D), *x_max = ref_alloc_f((size_t)s.all.len * D);
    cr_assert_eq(rv_vit_embed(m, be, &s.all, x, NULL), RV_OK, "%s", rv_last_error());
    rv_vit_tokens no_layout = s.all;
    no_layout.layout = NULL;
    cr_assert_eq(rv_vit_embed(m, be, &no_layout, x_max, NULL), RV_OK, "%s", rv_last_error());
    for (int64_t w = 0; w < 3; w++) {
        rv_vit_tokens b = block_tokens(&s, w);
        float *xb = ref_alloc_f((size_t)b.len * D);
        cr_assert_eq(rv_vit_embed(m, be, &b, xb, NULL), RV_OK, "%s", rv_last_error());
        const int64_t a = rv_tok_window_start(&s.L, w);
        cr_assert_arr_eq(x + a * D, xb, sizeof(float) * (size_t)(b.len * D),
                         "block %lld: the embedding differs from the block's own", (long long)w);
        int same = !memcmp(x_max + a * D, xb, sizeof(float) * (size_t)(b.len * D));
        cr_assert_eq(same, w < 2, "block %lld: at the longest block's steps the embedding %s "
                     "the block's own", (long long)w, same ? "equals" : "differs from");
        free(xb);
    }
    free(x), free(x_max);
    rv_backend_free(&be);
    seq_free(&s);
    rv_vit_free(&m);
}

/* ---- forward and backward under block attention ----------------------------------------- */

typedef struct job {
    const rv_vit_model *m;
    const seq *s;
    rv_shard_plan plan;
    rv_span span;
    const rv_vit_tokens *tokens; /* cp 1 only: these instead of s's slice */
    const float *dy;             /* (len, D) */
    float *y;                    /* (len, D) by global index */
    rv_vit_model **grad;         /* one per rank */
} job;

static rv_status rank_fn(rv_comm *comm, void *arg)
{
    job *j = arg;
    const int r = comm->rank;
    vit_slice sl;
    rv_vit_tokens t;
    if (j->tokens) {
        t = *j->tokens;
    } else {
        vit_slice_make(&j->s->all, j->s->patch_of, NULL, 1, j->s->L.audio_dim, &j->plan, r, &sl);
        t = sl.t;
    }
    rv_backend *be = NULL;
    float *y = ref_alloc_f((size_t)(t.len * D)), *dy = ref_alloc_f((size_t)(t.len * D));
    for (int64_t k = 0; k < t.len; k++)
        memcpy(dy + k * D, j->dy + (j->tokens ? k : sl.global[k]) * D, sizeof(float) * D);
    rv_vit_acts *acts = NULL;
    rv_status st = rv_backend_cpu_create(1, &be);
    rv_vit_run run = {.be = be, .comm = comm, .plan = j->plan, .strategy = RV_CP_RING,
                      .span = j->span};
    if (st == RV_OK)
        st = rv_vit_forward_train(j->m, &run, &t, NULL, NULL, y, &acts, NULL);
    if (st == RV_OK)
        st = rv_vit_backward(j->m, &run, &t, acts, dy, j->grad[r], NULL, NULL);
    if (st == RV_OK)
        for (int64_t k = 0; k < t.len; k++)
            memcpy(j->y + (j->tokens ? k : sl.global[k]) * D, y + k * D, sizeof(float) * D);
    rv_vit_acts_free(&acts);
    rv_backend_free(&be);
    free(y), free(dy);
    if (!j->tokens)
        vit_slice_free(&sl);
    return st;
}

static double max_abs(const float *a, size_t n)
{
    double e = 0;
    for (size_t i = 0; i < n; i++)
        e = fmax(e, fabs(a[i]));
    return e;
}

Test(vit_block_steps, block_attention_equals_the_blocks_forward_and_backward)
{
    rv_vit_config c = ast_config();
    rv_vit_model *m = ast_model(&c);
    seq s;
    seq_make(&c, &s);
    const int64_t S = s.all.len;
    float *dy = ref_alloc_f((size_t)S * D);
    ref_rng r = ref_rng_make(79);
    ref_fill_uniform(&r, dy, (size_t)S * D, -1.0f, 1.0f);
    /* each block alone, full attention: outputs and the gradients' sum */
    float *y_blocks = ref_alloc_f((size_t)S * D);
    rv_vit_model *g_sum = NULL;
    cr_assert_eq(rv_vit_new(&c, &g_sum), RV_OK);
    rv_vit_grad_zero(g_sum);
    for (int64_t w = 0; w < s.L.windows; w++) {
        rv_vit_tokens b = block_tokens(&s, w);
        const int64_t a = rv_tok_window_start(&s.L, w);
        job j = {.m = m, .s = &s, .tokens = &b, .dy = dy + a * D, .y = y_blocks + a * D};
        rv_shard_plan_make(RV_SHARD_CONTIGUOUS, 1, b.len, &j.plan);
        rv_vit_model *g = NULL;
        cr_assert_eq(rv_vit_new(&c, &g), RV_OK);
        rv_vit_grad_zero(g);
        j.grad = &g;
        cr_assert_eq(rv_local_run(1, rank_fn, &j), RV_OK, "block %lld: %s", (long long)w,
                     rv_last_error());
        for (size_t k = 0; k < g->arena_floats; k++)
            g_sum->arena[k] += g->arena[k];
        rv_vit_free(&g);
    }
    const double gscale = max_abs(g_sum->arena, g_sum->arena_floats);
    const int ns[] = {1, 3};
    for (int ni = 0; ni < 2; ni++) {
        const int n = ns[ni];
        job j = {.m = m, .s = &s, .span = {RV_SPAN_BLOCK, 1.0}, .dy = dy,
                 .y = ref_alloc_f((size_t)S * D)};
        rv_shard_plan_make(RV_SHARD_CONTIGUOUS, n, S, &j.plan);
        rv_vit_model *g[3] = {NULL, NULL, NULL};
        for (int k = 0; k < n; k++) {
            cr_assert_eq(rv_vit_new(&c, &g[k]), RV_OK);
            rv_vit_grad_zero(g[k]);
        }
        j.grad = g;
        cr_assert_eq(rv_local_run(n, rank_fn, &j), RV_OK, "cp %d: %s", n, rv_last_error());
        double e = 0, ymax = max_abs(y_blocks, (size_t)S * D);
        for (size_t k = 0; k < (size_t)S * D; k++)
            e = fmax(e, fabs(j.y[k] - y_blocks[k]));
        cr_assert_leq(e, 1e-5 * ymax, "cp %d: outputs differ from the blocks' own by %.3g "
                      "(of %.3g)", n, e, ymax);
        double ge = 0;
        for (size_t k = 0; k < g_sum->arena_floats; k++) {
            double v = 0;
            for (int q = 0; q < n; q++)
                v += g[q]->arena[k];
            ge = fmax(ge, fabs(v - g_sum->arena[k]));
        }
        cr_assert_leq(ge, 1e-5 * gscale, "cp %d: gradients differ from the blocks' sum by %.3g "
                      "(of %.3g)", n, ge, gscale);
        for (int k = 0; k < n; k++)
            rv_vit_free(&g[k]);
        free(j.y);
    }
    rv_vit_free(&g_sum);
    free(y_blocks), free(dy);
    seq_free(&s);
    rv_vit_free(&m);
}
