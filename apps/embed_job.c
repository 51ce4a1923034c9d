/* embed_job.c: one recording on one rank of `ringvit embed`. Every rank:
 *   1. probe: reads the file's headers and plans the token sequence from them
 *      (rv_tok_layout_from_probe), the same on every rank; a file that states
 *      no duration (a still image) is first counted by rank 0 and the counts
 *      shared; rank 0 also decides --resume skips;
 *   2. decode + tokenize: only this rank's slice of the sequence under the
 *      shard plan (zigzag with --causal, else contiguous), streamed chunk by
 *      chunk into arrays sized from the plan, so a rank never holds more than
 *      its slice;
 *   3. encode: the context-parallel forward, then pooling by all-reduce;
 *   4. write (rank 0): the output; with --tokens the per-token outputs are
 *      first gathered to rank 0 in sequence order, through a scratch file.
 * The ranks vote after each stage (embed_agree). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <jansson.h>

#include "embed.h"
#include "embed_rank.h"
#include "ingest_cli.h"
#include "rv_tokenize.h"
#include "spill_file.h"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* Peak resident set of this process, bytes. */
static double peak_rss(void)
{
    struct rusage u;
    return getrusage(RUSAGE_SELF, &u) == 0 ? (double)u.ru_maxrss * 1024.0 : 0.0;
}

/* ---- this rank's slice ----------------------------------------------------------- */

/* A rank's tokens as they stream from the tokenizer: their descriptions, and
 * their embeddings computed batch by batch (rv_vit_embed), so the patches of a
 * long recording are never held whole. */
typedef struct slice {
    int64_t len, nvideo, naudio;        /* expected, from the plan */
    int64_t got, got_video, got_audio;  /* collected */
    uint8_t *modality;                  /* (len) */
    int64_t *pos;                       /* (len, 3) */
    double *time;                       /* (len, 2) */
    int64_t *window;                    /* (len) the tokens' windows (blocks) */
    float *y;                           /* (len, D) embeddings, then the forward's output */
    const rv_vit_model *model;
    rv_backend *hb;                     /* the host backend the embedding runs on */
    int grid;                           /* patches per frame side */
    int64_t audio_steps;                /* rv_vit_tokens.audio_steps */
    double flops;                       /* the embedding's */
    embed_report *report;
    int64_t report_scale;               /* tokens the report counts per token made here */
    rv_comm_watch *watch;               /* beaten per batch: this rank is working */
} slice;

static void slice_free(slice *s)
{
    free(s->modality), free(s->pos), free(s->time), free(s->window), free(s->y);
    memset(s, 0, sizeof *s);
}

static void *alloc_rows(int64_t rows, int64_t width, size_t elem)
{
    return malloc((size_t)(rows > 0 ? rows : 1) * (size_t)width * elem);
}

static rv_status slice_alloc(slice *s, const rv_tok_layout *L, const rv_shard_plan *sp,
                             int rank, int dim)
{
    rv_shard_seg seg[RV_SHARD_MAX_SEGS];
    int n = rv_shard_segments(sp, rank, seg);
    s->len = rv_shard_len(sp, rank);
    for (int i = 0; i < n; i++) {
        s->nvideo += rv_tok_video_before(L, seg[i].start + seg[i].len) -
                     rv_tok_video_before(L, seg[i].start);
        s->naudio += rv_tok_audio_before(L, seg[i].start + seg[i].len) -
                     rv_tok_audio_before(L, seg[i].start);
    }
    s->modality = alloc_rows(s->len, 1, 1);
    s->pos = alloc_rows(s->len, 3, sizeof(int64_t));
    s->time = alloc_rows(s->len, 2, sizeof(double));
    s->window = alloc_rows(s->len, 1, sizeof(int64_t));
    s->y = alloc_rows(s->len, dim, sizeof(float));
    if (!s->modality || !s->pos || !s->time || !s->window || !s->y)
        return rv_fail(RV_ERR_NOMEM, "rank %d: out of memory for its %lld tokens (%lld video, "
                       "%lld audio)", rank, (long long)s->len, (long long)s->nvideo,
                       (long long)s->naudio);
    return RV_OK;
}

static size_t slice_bytes(const slice *s, int dim)
{
    return (size_t)s->len * (1 + 4 * sizeof(int64_t) + 2 * sizeof(double) + dim * sizeof(float));
}

/* memcpy that accepts n == 0 with NULL pointers (empty batches have them). */
static void copy(void *dst, const void *src, size_t n)
{
    if (n)
        memcpy(dst, src, n);
}

static rv_status on_batch(const rv_tok_batch *b, void *user)
{
    slice *s = user;
    rv_comm_watch_beat(s->watch);
    if (embed_stop_signal)
        return rv_fail(RV_ERR_IO, "stopped by a signal");
    if (s->got + b->count > s->len || s->got_video + b->nvideo > s->nvideo ||
        s->got_audio + b->naudio > s->naudio)
        return rv_fail(RV_ERR_INTERNAL, "tokenizer handed out more tokens than the plan gives "
                       "this rank (%lld)", (long long)s->len);
    size_t c = (size_t)b->count;
    copy(s->modality + s->got, b->modality, c);
    copy(s->pos + 3 * s->got, b->pos, sizeof(int64_t) * 3 * c);
    copy(s->time + 2 * s->got, b->time, sizeof(double) * 2 * c);
    copy(s->window + s->got, b->window, sizeof(int64_t) * c);
    /* The batch's embeddings now; its patches die with the batch. */
    const int D = s->model->cfg.dim;
    rv_vit_tokens bt = {.len = b->count, .modality = b->modality, .pos = b->pos, .time = b->time,
                        .nvideo = b->nvideo, .video = b->video, .naudio = b->naudio,
                        .audio = b->audio, .grid = s->grid, .audio_steps = s->audio_steps,
                        .window = b->window};
    rv_status st = rv_vit_embed(s->model, s->hb, &bt, s->y + (size_t)s->got * D, &s->flops);
    if (st != RV_OK)
        return st;
    s->got += b->count;
    s->got_video += b->nvideo;
    s->got_audio += b->naudio;
    embed_report_tokens(s->report, b->count * s->report_scale);
    return RV_OK;
}

/* The audio steps a token's positions are resampled to (AST): the sequence's,
 * or with blocks (positions restart in each) the longest block's. */
static int64_t audio_steps_of(const rv_tok_layout *L)
{
    if (!L->opts.window_positions)
        return L->steps;
    int64_t most = 0;
    for (int64_t w = 0; w < L->windows; w++) {
        int64_t g0, g1, p0, p1;
        rv_tok_window_items(L, w, &g0, &g1, &p0, &p1);
        most = p1 - p0 > most ? p1 - p0 : most;
    }
    return most;
}

/* ---- counting a file that states no duration (rank 0) --------------------------- */

typedef struct count {
    int64_t frames, samples;
    rv_comm_watch *watch; /* beaten per chunk: the other ranks wait for the count */
} count;

static rv_status on_chunk(const rv_ingest_chunk *c, void *user)
{
    count *n = user;
    rv_comm_watch_beat(n->watch);
    if (embed_stop_signal)
        return rv_fail(RV_ERR_IO, "stopped by a signal");
    n->frames += c->nframes;
    n->samples += c->nsamples;
    return RV_OK;
}

/* ---- gathering the per-token outputs (--tokens) ---------------------------------- */

typedef struct piece {
    int rank;
    int64_t start, len, local; /* global start, tokens, offset in the rank's slice */
} piece;

static int piece_cmp(const void *a, const void *b)
{
    const piece *x = a, *y = b;
    return (x->start > y->start) - (x->start < y->start);
}

/* The non-empty segments of every rank in sequence order; returns how many. */
static int pieces_of(const rv_shard_plan *sp, piece *out)
{
    int n = 0;
    for (int r = 0; r < sp->ranks; r++) {
        rv_shard_seg seg[RV_SHARD_MAX_SEGS];
        int k = rv_shard_segments(sp, r, seg);
        int64_t local = 0;
        for (int i = 0; i < k; i++) {
            if (seg[i].len > 0)
                out[n++] = (piece){r, seg[i].start, seg[i].len, local};
            local += seg[i].len;
        }
    }
    qsort(out, (size_t)n, sizeof *out, piece_cmp);
    return n;
}

/* Rank 0 receives every slice in sequence order and appends it to sp_out;
 * the others send theirs. A failure to write on rank 0 still drains every
 * message (so no rank waits in vain) and is returned in *write_st. Every wait is
 * the watch's: as long as the peer it waits for works (rank 0 writing the
 * slices before, a sender still sending), and no longer than --timeout after
 * the peer falls silent. */
static rv_status gather_tokens(embed_rank *k, const rv_shard_plan *sp, const float *y, int dim,
                               rv_spill *sp_out, rv_status *write_st)
{
    const size_t row = sizeof(float) * (size_t)dim;
    piece *pc = malloc(sizeof *pc * (size_t)(2 * sp->ranks));
    rv_comm_request **req = calloc((size_t)(2 * sp->ranks), sizeof *req);
    int *to0 = calloc((size_t)(2 * sp->ranks), sizeof *to0); /* zeros: the peer of each send */
    float *buf = NULL;
    rv_status st = RV_OK;
    *write_st = RV_OK;
    if (!pc || !req || !to0) {
        st = rv_fail(RV_ERR_NOMEM, "rank %d: out of memory", k->rank);
        goto end;
    }
    int n = pieces_of(sp, pc), nreq = 0;
    if (k->rank != 0) {
        for (int i = 0; i < n && st == RV_OK; i++)
            if (pc[i].rank == k->rank)
                st = rv_comm_isend(k->ctl, y + pc[i].local * dim, row * (size_t)pc[i].len, 0, i,
                                   &req[nreq++]);
        rv_status w = rv_comm_watch_waitall(k->watch, req, to0, nreq);
        st = st != RV_OK ? st : w;
        goto end;
    }
    int64_t most = 0;
    for (int i = 0; i < n; i++)
        if (pc[i].rank != 0 && pc[i].len > most)
            most = pc[i].len;
    if (most > 0 && !(buf = malloc(row * (size_t)most))) {
        /* Without a buffer nothing can be received; the others time out. */
        st = rv_fail(RV_ERR_NOMEM, "rank 0: out of memory for %lld gathered tokens",
                     (long long)most);
        goto end;
    }
    for (int i = 0; i < n && st == RV_OK; i++) {
        const float *src = y + pc[i].local * dim;
        if (pc[i].rank != 0) {
            rv_comm_request *r = NULL;
            if ((st = rv_comm_irecv(k->ctl, buf, row * (size_t)pc[i].len, pc[i].rank, i, &r)) != RV_OK ||
                (st = rv_comm_watch_waitall(k->watch, &r, &pc[i].rank, 1)) != RV_OK)
                break;
            src = buf;
        }
        if (*write_st == RV_OK)
            *write_st = rv_spill_write(sp_out, src, row * (size_t)pc[i].len);
        rv_comm_watch_beat(k->watch);
    }
end:
    free(buf);
    free(req);
    free(to0);
    free(pc);
    return st;
}

/* ---- one input ------------------------------------------------------------------- */

static double vote_max(const embed_rank *k, int i)
{
    double m = 0;
    for (int r = 0; r < k->size; r++)
        if (k->votes[r].val[i] > m)
            m = k->votes[r].val[i];
    return m;
}

/* A failed vote: the message into res (rank 0). */
static int failed(int outcome, embed_result *res)
{
    if (outcome == AGREE_FAILED || outcome == AGREE_FATAL) {
        res->status = EMBED_FAILED;
        snprintf(res->error, sizeof res->error, "%s", rv_last_error());
    }
    return outcome;
}

int embed_job_run(embed_rank *k, int index, embed_result *res)
{
    const embed_settings *set = k->set;
    const embed_input *in = &k->b->in[index];
    const rv_vit_config *cfg = &set->model->cfg;
    const int D = cfg->dim;
    embed_report *rep = k->rank == 0 ? k->b->report : NULL;
    rv_probe *probe = NULL;
    rv_tok_layout L;
    rv_shard_plan sp;
    rv_vit_pooled pooled;
    rv_vit_stats vs;
    rv_tok_stats ts;
    slice s;
    rv_spill tok_spill = {.fd = -1};
    rv_backend *hb = NULL;
    double *tok_time = NULL;
    int64_t *tok_pos = NULL;
    uint8_t *tok_mod = NULL;
    char *probe_text = NULL;
    memset(&pooled, 0, sizeof pooled);
    memset(&vs, 0, sizeof vs);
    memset(&ts, 0, sizeof ts);
    memset(&s, 0, sizeof s);
    memset(res, 0, sizeof *res);
    int out;
    double t0 = now_s(), t, end_s = NAN;
    rv_status st;

    /* 1. probe and plan (rank 0: --resume) */
    embed_report_stage(rep, index, in->path, "probe", 0, 0);
    double skip = k->rank == 0 && set->resume && embed_output_complete(in->output, set);
    double need_count = 0;
    rv_clear_error();
    st = rv_probe_file(in->path, &probe);
    if (st == RV_OK) {
        st = rv_tok_layout_from_probe(probe, &set->to, &set->io, &L, &end_s);
        if (st == RV_ERR_UNSUPPORTED) {
            need_count = 1;
            st = RV_OK;
        }
    }
    double v1[3] = {skip, need_count, st == RV_OK && !need_count ? (double)L.seq : -1};
    out = embed_agree(k, skip ? RV_OK : st, v1, 3);
    if ((out == AGREE_OK || out == AGREE_FAILED) && k->votes[0].val[0]) {
        /* Rank 0's decision stands whatever the others' probes said. */
        res->status = EMBED_SKIPPED;
        out = AGREE_OK;
        goto end;
    }
    if (out != AGREE_OK)
        goto end;
    for (int r = 1; r < k->size; r++)
        if (k->votes[r].val[1] != k->votes[0].val[1] || k->votes[r].val[2] != k->votes[0].val[2]) {
            /* Every rank plans alone, so they must plan alike. */
            rv_fail(RV_ERR_FORMAT, "%s: rank %d planned %.0f tokens, rank 0 %.0f (did the file "
                    "change while it was read?)", in->path, r, k->votes[r].val[2],
                    k->votes[0].val[2]);
            out = failed(AGREE_FAILED, res);
            goto end;
        }
    if (k->votes[0].val[1]) {
        /* No stated duration: rank 0 counts the frames and samples. */
        embed_report_stage(rep, index, in->path, "count", 0, 0);
        count n = {.watch = k->watch};
        rv_ingest_stats is;
        memset(&is, 0, sizeof is);
        st = k->rank == 0 ? rv_ingest_stream(in->path, &set->io, on_chunk, &n, &is) : RV_OK;
        double v2[3] = {(double)n.frames, (double)n.samples, is.end_s};
        if ((out = embed_agree(k, st, v2, 3)) != AGREE_OK)
            goto end;
        end_s = k->votes[0].val[2];
        rv_clear_error();
        st = rv_tok_layout_make(&set->to, &set->io, (int64_t)k->votes[0].val[0],
                                (int64_t)k->votes[0].val[1], &L);
        if (st != RV_OK) {
            /* The same arithmetic on every rank: all fail alike. */
            out = failed(AGREE_FAILED, res);
            goto end;
        }
    }
    if (set->io.duration_s > 0 && set->io.start_s + set->io.duration_s < end_s)
        end_s = set->io.start_s + set->io.duration_s;
    res->tokens = L.seq;
    res->video_tokens = L.nvideo;
    res->audio_tokens = L.naudio;
    res->recording_s = end_s;
    if (L.nvideo + L.naudio == 0) {
        rv_fail(RV_ERR_FORMAT, "%s: nothing to embed: no video or audio tokens (%lld frames, "
                "%lld audio samples at these settings)", in->path, (long long)L.nframes,
                (long long)L.nsamples);
        out = failed(AGREE_FAILED, res);
        goto end;
    }
    /* What the input costs, before any of it is decoded: refused over --max-tokens
     * (tokens, or segments of the pooled output), else said when it is long. The
     * same arithmetic on every rank: all refuse alike. */
    const double hop = set->hop_s > 0 ? set->hop_s : set->segment_s;
    const double segments = isfinite(end_s) && hop > 0 ? ceil(end_s / hop) : 0;
    if (L.seq > set->max_tokens || segments > (double)set->max_tokens) {
        rv_fail(RV_ERR_INVALID,
                "%lld tokens and %.0f segments (of %g s) at these settings, more than "
                "--max-tokens %lld; raise --max-tokens if the memory and time are meant "
                "(each token and segment holds several rows of %d floats per rank)",
                (long long)L.seq, segments, hop, (long long)set->max_tokens, D);
        out = failed(AGREE_FAILED, res);
        goto end;
    }
    /* The forward's cost (full attention; a span's depends on the token times). */
    const double fwd_flops = set->span.kind == RV_SPAN_FULL
                                 ? rv_vit_forward_flops(cfg, L.seq, L.nvideo, L.naudio, set->causal)
                                 : 0;
    if (L.seq >= EMBED_LONG_TOKENS)
        embed_report_plan(rep, in->path, L.seq, L.nvideo, L.naudio, end_s, fwd_flops);
    /* Zigzag balances causal full attention; a span wants contiguous slices (its
     * ranks talk only to those its keys reach). */
    const rv_shard_kind kind = set->causal && set->span.kind == RV_SPAN_FULL ? RV_SHARD_ZIGZAG
                                                                          : RV_SHARD_CONTIGUOUS;
    if ((st = rv_tok_shard_plan(&L, kind, k->size, &sp)) != RV_OK) {
        out = failed(AGREE_FAILED, res);
        goto end;
    }
    st = slice_alloc(&s, &L, &sp, k->rank, D);
    s.model = set->model;
    s.grid = L.grid;
    s.audio_steps = audio_steps_of(&L);
    /* The embedding runs on the host: this rank's backend, or one of its own
     * beside a GPU. */
    if (st == RV_OK && strcmp(k->be->name, "cpu") != 0)
        st = rv_backend_cpu_create(set->threads, &hb);
    s.hb = hb ? hb : k->be;
    res->probe_s = now_s() - t0;

    /* 2. decode and tokenize this rank's slice */
    t = now_s();
    embed_report_stage(rep, index, in->path, "tokenize", end_s, L.seq);
    s.report = rep;
    s.report_scale = set->mpi ? k->size : 1;
    s.watch = k->watch;
    if (st == RV_OK)
        st = rv_tokenize_rank(in->path, &L, &sp, k->rank, on_batch, &s, &ts);
    rv_backend_free(&hb);
    if (st == RV_OK && (s.got != s.len || s.got_video != s.nvideo || s.got_audio != s.naudio))
        st = rv_fail(RV_ERR_INTERNAL, "rank %d: %lld tokens made, the plan gives it %lld",
                     k->rank, (long long)s.got, (long long)s.len);
    double tok_wall = now_s() - t;
    double v3[2] = {tok_wall, ts.cpu_s};
    if ((out = embed_agree(k, st, v3, 2)) != AGREE_OK)
        goto end;
    double stage = now_s() - t, slow = 0, slow_cpu = 0;
    for (int r = 0; r < k->size; r++)
        if (k->votes[r].val[0] >= slow)
            slow = k->votes[r].val[0], slow_cpu = k->votes[r].val[1];
    res->tokenize_s = slow > 0 ? stage * fmin(1.0, slow_cpu / slow) : 0;
    res->decode_s = stage - res->tokenize_s;

    /* 3. encode and pool */
    t = now_s();
    embed_report_flops(rep, fwd_flops);
    embed_report_stage(rep, index, in->path, "encode", end_s, L.seq);
    rv_vit_tokens tok = {.len = s.len, .modality = s.modality, .pos = s.pos, .time = s.time,
                         .nvideo = s.nvideo, .naudio = s.naudio, .grid = L.grid,
                         .audio_steps = s.audio_steps, .window = s.window};
    rv_vit_run run = {.be = k->be, .comm = k->dev ? k->dev : k->comm, .plan = sp,
                      .strategy = set->strategy,
                      .causal = set->causal, .weights = k->dev_weights, .span = set->span};
    rv_vit_pool_opts po = {.segment_s = set->segment_s, .end_s = end_s, .hop_s = set->hop_s};
    rv_clear_error();
    st = rv_vit_forward_embedded(set->model, &run, &tok, s.y, &vs);
    vs.flops += s.flops;
    if (st == RV_OK)
        st = rv_vit_pool(k->comm, &tok, s.y, D, &po, &pooled);
    if (st == RV_OK) /* every rank: the same sums give the same pooled output */
        st = rv_vit_pool_head(set->model, &pooled);
    size_t held = slice_bytes(&s, D) + vs.peak_bytes;
    double v4[4] = {now_s() - t, vs.flops, (double)held, peak_rss()};
    /* A rank that failed inside the collectives leaves the others timing out
     * there: the communicator is then broken and the vote says so. */
    if ((out = embed_agree(k, st, v4, 4)) != AGREE_OK)
        goto end;
    res->encode_s = now_s() - t;
    for (int r = 0; r < k->size; r++)
        res->flops += k->votes[r].val[1];
    res->rank_mb = vote_max(k, 2) / 1048576.0;
    res->rss_mb = vote_max(k, 3) / 1048576.0;

    /* 4. gather (--tokens) and write (rank 0) */
    t = now_s();
    embed_report_stage(rep, index, in->path, "write", end_s, L.seq);
    rv_status wst = RV_OK;
    if (set->tokens) {
        rv_clear_error();
        st = RV_OK;
        if (k->rank == 0) {
            tok_time = malloc(sizeof(double) * 2 * (size_t)L.seq);
            tok_pos = malloc(sizeof(int64_t) * 3 * (size_t)L.seq);
            tok_mod = malloc((size_t)L.seq);
            if (!tok_time || !tok_pos || !tok_mod)
                st = rv_fail(RV_ERR_NOMEM, "rank 0: out of memory for %lld tokens' metadata",
                             (long long)L.seq);
            if (st == RV_OK)
                st = rv_spill_open(&tok_spill, in->output);
        }
        if ((out = embed_agree(k, st, NULL, 0)) != AGREE_OK)
            goto end;
        if ((st = gather_tokens(k, &sp, s.y, D, &tok_spill, &wst)) != RV_OK) {
            /* The messages between ranks broke: nothing further can be trusted. */
            out = failed(AGREE_FATAL, res);
            goto end;
        }
    }
    if (k->rank == 0) {
        if (wst == RV_OK && set->tokens) {
            wst = rv_spill_map(&tok_spill);
            for (int64_t i = 0; i < L.seq && wst == RV_OK; i++) {
                rv_token tk;
                if ((i & 0xffff) == 0)
                    rv_comm_watch_beat(k->watch); /* the others wait in the next vote */
                if ((wst = rv_tok_info(&L, i, &tk)) != RV_OK)
                    break;
                tok_mod[i] = (uint8_t)tk.modality;
                memcpy(tok_pos + 3 * i, tk.pos, sizeof tk.pos);
                memcpy(tok_time + 2 * i, tk.time, sizeof tk.time);
            }
        }
        json_t *pj = rv_probe_json(probe);
        probe_text = pj ? json_dumps(pj, JSON_COMPACT | JSON_SORT_KEYS | JSON_REAL_PRECISION(17)) : NULL;
        json_decref(pj);
        if (wst == RV_OK) {
            embed_output o = {in->output, set, in->path, probe_text, &L, end_s, &pooled,
                              (const float *)tok_spill.map, tok_time, tok_mod, tok_pos};
            wst = embed_output_write(&o);
            rv_comm_watch_beat(k->watch);
        }
        if (wst != RV_OK) {
            res->status = EMBED_FAILED;
            snprintf(res->error, sizeof res->error, "writing %s: %s", in->output, rv_last_error());
        }
    }
    res->write_s = now_s() - t;
    out = AGREE_OK;
end:
    /* A failed vote: its message (rv_last_error) is the input's error. */
    if ((out == AGREE_FAILED || out == AGREE_FATAL) && res->status != EMBED_FAILED)
        failed(out, res);
    res->seconds = now_s() - t0;
    rv_spill_close(&tok_spill);
    free(tok_time), free(tok_pos), free(tok_mod), free(probe_text);
    rv_vit_pooled_free(&pooled);
    slice_free(&s);
    rv_backend_free(&hb);
    rv_probe_free(&probe);
    return out;
}
