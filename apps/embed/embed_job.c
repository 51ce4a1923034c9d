/* embed_job.c: one recording on one group of `ringvit embed`, from the work
 * each rank prepared (embed_prepare.c, ahead with --prefetch). Every rank of
 * the group:
 *   1. votes on its probe and plan, the same on every rank; a file that states
 *      no duration (a still image) is first counted by rank 0 and the counts
 *      shared, then its slices are tokenized in turn;
 *   2. votes on its decoded and tokenized slice;
 *   3. encode: the context-parallel forward, then pooling by all-reduce;
 *   4. write (rank 0): the output; with --tokens the per-token outputs are
 *      first gathered to rank 0 in sequence order, through a scratch file.
 * The ranks vote after each stage (embed_agree). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <jansson.h>

#include "embed.h"
#include "embed_rank.h"
#include "ingest_cli.h"
#include "rv_clock.h"
#include "rv_tokenize.h"
#include "spill_file.h"

/* Peak resident set of this process, bytes. */
static double peak_rss(void)
{
    struct rusage u;
    return getrusage(RUSAGE_SELF, &u) == 0 ? (double)u.ru_maxrss * 1024.0 : 0.0;
}

/* ---- counting a file that states no duration (rank 0) --------------------------- */

/* Beaten per chunk: the other ranks wait for the count. */
static rv_status count_beat(void *user)
{
    embed_rank *k = user;
    rv_comm_watch_beat(k->watch);
    return embed_stop_signal ? rv_fail(RV_ERR_IO, "stopped by a signal") : RV_OK;
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
                out[n++] = (piece){.rank = r, .start = seg[i].start, .len = seg[i].len,
                                   .local = local};
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
                               spill *sp_out, rv_status *write_st)
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
            *write_st = spill_write(sp_out, src, row * (size_t)pc[i].len);
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


/* This rank's outcome of a prepared stage, as its thread-local error for the vote. */
static rv_status stage_status(rv_status st, const char *msg)
{
    if (st != RV_OK)
        rv_fail(st, "%s", msg);
    else
        rv_clear_error();
    return st;
}

int embed_job_run(embed_rank *k, embed_prep *p, embed_result *res)
{
    const embed_settings *set = k->set;
    const int index = p->index;
    const embed_input *in = &k->b->in[index];
    const rv_vit_config *cfg = &set->model->cfg;
    const int D = cfg->dim;
    embed_report *rep = k->rank == 0 ? k->b->report : NULL;
    rv_tok_layout *L = &p->rec.layout;
    embed_slice *s = &p->s;
    rv_vit_pooled pooled;
    rv_vit_stats vs;
    spill tok_spill = {.fd = -1};
    double *tok_time = NULL;
    int64_t *tok_pos = NULL;
    uint8_t *tok_mod = NULL;
    char *probe_text = NULL;
    memset(&pooled, 0, sizeof pooled);
    memset(&vs, 0, sizeof vs);
    memset(res, 0, sizeof *res);
    res->group = k->group;
    int out;
    double t0 = rv_clock_s(), t;
    rv_status st;

    if (p->skip) { /* group rank 0's --resume decision, shared by the claim's vote */
        res->status = EMBED_SKIPPED;
        out = AGREE_OK;
        goto end;
    }
    /* 1. probe and plan: ready once the slice is (with --prefetch it comes from
     *    a thread; the group waits for its slowest rank in the next vote) */
    embed_report_stage(rep, index, in->path, p->queued && !atomic_load(&p->finished)
                                                  ? "tokenize" : "probe", 0, 0);
    double wait_s = p->queued ? embed_ahead_wait(k->ahead, p) : p->wait_s;
    st = stage_status(p->probe_st, p->probe_msg);
    double v1[2] = {(double)p->rec.need_count,
                    st == RV_OK && !p->rec.need_count ? (double)L->seq : -1};
    if ((out = embed_agree(k, st, v1, 2)) != AGREE_OK)
        goto end;
    for (int r = 1; r < k->size; r++)
        if (k->votes[r].val[0] != k->votes[0].val[0] || k->votes[r].val[1] != k->votes[0].val[1]) {
            /* Every rank plans alone, so they must plan alike. */
            rv_fail(RV_ERR_FORMAT, "%s: rank %d planned %.0f tokens, rank 0 %.0f (did the file "
                    "change while it was read?)", in->path, r, k->votes[r].val[1],
                    k->votes[0].val[1]);
            out = failed(AGREE_FAILED, res);
            goto end;
        }
    /* The embedding runs on the host: this rank's backend, or its host backend
     * beside a GPU (only for what is tokenized in turn here). */
    if (p->reached == PREP_PROBED) {
        /* No stated duration: rank 0 counts the frames and samples, then every
         * rank tokenizes its slice in turn. */
        embed_report_stage(rep, index, in->path, "count", 0, 0);
        int64_t frames = 0, samples = 0;
        double end_s = 0;
        st = k->rank == 0 ? rv_tok_recording_count(in->path, &set->to, &p->rec, count_beat, k,
                                                   &frames, &samples, &end_s)
                          : RV_OK;
        double v2[3] = {(double)frames, (double)samples, end_s};
        if ((out = embed_agree(k, st, v2, 3)) != AGREE_OK)
            goto end;
        rv_clear_error();
        st = rv_tok_recording_counted(&set->to, &p->rec, (int64_t)k->votes[0].val[0],
                                      (int64_t)k->votes[0].val[1], k->votes[0].val[2]);
        if (st != RV_OK) {
            /* The same arithmetic on every rank: all fail alike. */
            out = failed(AGREE_FAILED, res);
            goto end;
        }
        embed_report_stage(rep, index, in->path, "tokenize", p->rec.end_s, L->seq);
        p->s.report = rep;
        embed_prepare_tokens(k, p, k->host ? k->host : k->be, k->watch);
    }
    res->tokens = L->seq;
    res->video_tokens = L->nvideo;
    res->audio_tokens = L->naudio;
    res->recording_s = p->rec.end_s - p->rec.rec_start;
    res->probe_s = p->probe_s;

    /* 2. this rank's slice, decoded and tokenized */
    t = rv_clock_s();
    st = stage_status(p->tok_st, p->tok_msg);
    double v3[3] = {p->tok_wall, p->ts.cpu_s, wait_s};
    if ((out = embed_agree(k, st, v3, 3)) != AGREE_OK)
        goto end;
    double slow = 0, slow_cpu = 0;
    for (int r = 0; r < k->size; r++)
        if (k->votes[r].val[0] >= slow)
            slow = k->votes[r].val[0], slow_cpu = k->votes[r].val[1];
    res->tokenize_s = slow > 0 ? slow * fmin(1.0, slow_cpu / slow) : 0;
    res->decode_s = slow - res->tokenize_s;
    /* The encoder's wait: the slowest rank's wait for its slice plus the vote's. */
    res->wait_s = vote_max(k, 2) + (rv_clock_s() - t);

    /* 3. encode and pool */
    t = rv_clock_s();
    const double fwd_flops = set->span.kind == RV_SPAN_FULL
                                 ? rv_vit_forward_flops(cfg, L->seq, L->nvideo, L->naudio, set->causal)
                                 : 0;
    embed_report_flops(rep, fwd_flops);
    embed_report_stage(rep, index, in->path, "encode", p->rec.end_s, L->seq);
    rv_vit_tokens tok = rv_vit_slice_tokens(L, &s->t);
    rv_vit_run run = {.be = k->be, .comm = k->dev ? k->dev : k->comm, .plan = s->t.plan,
                      .strategy = set->strategy,
                      .causal = set->causal, .weights = k->dev_weights, .span = set->span,
                      .host = k->host};
    rv_vit_pool_opts po = {.segment_s = set->segment_s, .end_s = p->rec.end_s, .hop_s = set->hop_s,
                           .start_s = p->rec.io.start_s, .t0 = p->rec.t0};
    rv_clear_error();
    st = rv_vit_forward_embedded(set->model, &run, &tok, s->y, &vs);
    vs.flops += s->flops;
    if (st == RV_OK)
        st = rv_vit_pool(k->comm, &tok, s->y, D, &po, &pooled);
    if (st == RV_OK) /* every rank: the same sums give the same pooled output */
        st = rv_vit_pool_head(set->model, &pooled);
    size_t held = embed_slice_bytes(s, D) + vs.peak_bytes;
    double v4[4] = {rv_clock_s() - t, vs.flops, (double)held, peak_rss()};
    /* A rank that failed inside the collectives leaves the others timing out
     * there: the communicator is then broken and the vote says so. */
    if ((out = embed_agree(k, st, v4, 4)) != AGREE_OK)
        goto end;
    res->encode_s = rv_clock_s() - t;
    for (int r = 0; r < k->size; r++)
        res->flops += k->votes[r].val[1];
    res->rank_mb = vote_max(k, 2) / 1048576.0;
    res->rss_mb = vote_max(k, 3) / 1048576.0;

    /* 4. gather (--tokens) and write (rank 0) */
    t = rv_clock_s();
    embed_report_stage(rep, index, in->path, "write", p->rec.end_s, L->seq);
    rv_status wst = RV_OK;
    if (set->tokens) {
        rv_clear_error();
        st = RV_OK;
        if (k->rank == 0) {
            tok_time = malloc(sizeof(double) * 2 * (size_t)L->seq);
            tok_pos = malloc(sizeof(int64_t) * 3 * (size_t)L->seq);
            tok_mod = malloc((size_t)L->seq);
            if (!tok_time || !tok_pos || !tok_mod)
                st = rv_fail(RV_ERR_NOMEM, "rank 0: out of memory for %lld tokens' metadata",
                             (long long)L->seq);
            if (st == RV_OK)
                st = spill_open(&tok_spill, in->output);
        }
        if ((out = embed_agree(k, st, NULL, 0)) != AGREE_OK)
            goto end;
        if ((st = gather_tokens(k, &s->t.plan, s->y, D, &tok_spill, &wst)) != RV_OK) {
            /* The messages between ranks broke: nothing further can be trusted. */
            out = failed(AGREE_FATAL, res);
            goto end;
        }
    }
    if (k->rank == 0) {
        if (wst == RV_OK && set->tokens) {
            wst = spill_map(&tok_spill);
            for (int64_t i = 0; i < L->seq && wst == RV_OK; i++) {
                rv_token tk;
                if ((i & 0xffff) == 0)
                    rv_comm_watch_beat(k->watch); /* the others wait in the next vote */
                if ((wst = rv_tok_info(L, i, &tk)) != RV_OK)
                    break;
                tok_mod[i] = (uint8_t)tk.modality;
                memcpy(tok_pos + 3 * i, tk.pos, sizeof tk.pos);
                memcpy(tok_time + 2 * i, tk.time, sizeof tk.time); /* container's clock */
            }
        }
        json_t *pj = cli_probe_json(p->probe);
        probe_text = pj ? json_dumps(pj, JSON_COMPACT | JSON_SORT_KEYS | JSON_REAL_PRECISION(17)) : NULL;
        json_decref(pj);
        if (wst == RV_OK) {
            embed_output o = {.path = in->output, .set = set, .source = in->path,
                              .probe_json = probe_text, .L = L,
                              .recording_s = p->rec.end_s - p->rec.rec_start,
                              .time_origin = p->rec.time_origin,
                              .start_s = rv_tok_start_time(L), .pooled = &pooled,
                              .tokens = (const float *)tok_spill.map, .token_time = tok_time,
                              .token_modality = tok_mod, .token_pos = tok_pos};
            wst = embed_output_write(&o);
            rv_comm_watch_beat(k->watch);
        }
        if (wst != RV_OK) {
            res->status = EMBED_FAILED;
            snprintf(res->error, sizeof res->error, "writing %s: %s", in->output, rv_last_error());
        }
    }
    res->write_s = rv_clock_s() - t;
    out = AGREE_OK;
end:
    /* A failed vote: its message (rv_last_error) is the input's error. */
    if ((out == AGREE_FAILED || out == AGREE_FATAL) && res->status != EMBED_FAILED)
        failed(out, res);
    /* From the start of its preparation (ahead or in turn) to its output. */
    res->seconds = p->t_start > 0 ? rv_clock_s() - p->t_start : rv_clock_s() - t0;
    spill_close(&tok_spill);
    free(tok_time), free(tok_pos), free(tok_mod), free(probe_text);
    rv_vit_pooled_free(&pooled);
    embed_prepare_free(p);
    return out;
}
