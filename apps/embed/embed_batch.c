/* embed_batch.c: one rank's run of `ringvit embed`. The world's ranks form
 * groups of --cp ranks; each rank opens the library's embed job over its group
 * (rv_embed.h: its backend, the group's control communicators, the votes), then
 * its group takes inputs until none is left: rank 0 of the group claims the next
 * (embed_dispatch.c) and decides --resume, the group agrees on it, every rank
 * queues it (with --prefetch N the job's worker prepares up to N claimed inputs
 * ahead while the encoder works), runs it, and the group's rank 0 writes its
 * output. At the end rank 0 of the group reports the group finished and shares
 * the batch's counts, so every process of an MPI run exits with the same status. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "embed.h"
#include "embed_rank.h"
#include "out_path.h"
#include "rv_clock.h"

/* ---- what the job tells the batch ------------------------------------------------------ */

static void on_stage(void *user, int index, const char *path, const char *stage, double total_s,
                     int64_t tokens, double flops)
{
    embed_rank *k = user;
    if (strcmp(stage, "encode") == 0)
        embed_report_flops(k->b->report, flops);
    embed_report_stage(k->b->report, index, path, stage, total_s, tokens);
}

static void on_plan(void *user, const char *path, int64_t tokens, int64_t video, int64_t audio,
                    double seconds, double flops)
{
    embed_rank *k = user;
    embed_report_plan(k->b->report, path, tokens, video, audio, seconds, flops);
}

/* Rank 0's tokens stand for its group's (the ranks' slices are about equal). */
static void on_tokens(void *user, int64_t n)
{
    embed_rank *k = user;
    if (k->rank == 0)
        embed_report_tokens(k->b->report, n * k->size);
}

static int on_stop(void *user)
{
    (void)user;
    return embed_stop_signal != 0;
}

/* ---- one input ---------------------------------------------------------------------------- */

/* A claimed input: queued to the job unless --resume skips it. */
typedef struct claim {
    int index;
    int skip;
    rv_embed_input *in;  /* NULL when skipped, or when it could not be queued (the run
                            then fails it on every rank alike) */
} claim;

/* The group's next input: rank 0 claims it and decides --resume, the group
 * agrees. Returns a vote outcome; c->index -1 when none is left. */
typedef struct claim_vote {
    int32_t index;       /* -1: none left */
    int32_t skip;        /* 1: its complete output exists (--resume) */
} claim_vote;

static rv_vote_outcome claim_next(embed_rank *k, rv_vote *vote, claim *c)
{
    claim_vote mine = {.index = -1};
    rv_status st = RV_OK;
    rv_clear_error();
    if (k->rank == 0) {
        int idx = -1;
        st = embed_dispatch_claim(k->disp, &idx);
        mine.index = idx;
        if (st == RV_OK && idx >= 0 && k->set->resume)
            mine.skip = embed_output_complete(k->b->in[idx].output, k->set);
    }
    rv_vote_outcome v = rv_embed_vote(k->job, st, &mine, sizeof mine, vote);
    if (v == RV_VOTE_FAILED) /* without world rank 0 no input can be handed out */
        v = RV_VOTE_BROKEN;
    const claim_vote *r0 = rv_vote_payload(vote, 0);
    *c = (claim){.index = v == RV_VOTE_OK ? r0->index : -1, .skip = v == RV_VOTE_OK && r0->skip};
    if (c->index >= 0 && !c->skip && rv_embed_queue(k->job, k->b->in[c->index].path, c->index,
                                                    &c->in) != RV_OK)
        c->in = NULL;
    return v;
}

/* Rank 0: the output written where the batch named it: "-" to standard output,
 * else through the output-path rules (out_path.h), atomically. */
static rv_status write_output(rv_embed_output *o, const char *path)
{
    rv_st_writer *w = rv_embed_output_writer(o);
    if (!w)
        return RV_ERR_NOMEM;
    if (out_is_stdout(path)) /* -o -: in place, no temporary file */
        return out_write_st(w, path);
    /* Checked before the batch and again now; a symlink is written through to
     * its target. */
    char target[4096];
    rv_status st = out_target_path(path, target, sizeof target);
    if (st != RV_OK)
        return st;
    /* rv_st_writer_write's temporary name, for the signal handler. */
    snprintf(embed_tmp_path, sizeof embed_tmp_path, "%s.tmp.%ld", target, (long)getpid());
    st = rv_st_writer_write(w, target);
    embed_tmp_path[0] = '\0';
    return st;
}

static void take_stats(embed_result *res, const rv_embed_stats *s)
{
    res->seconds = s->seconds;
    res->probe_s = s->probe_s;
    res->decode_s = s->decode_s;
    res->tokenize_s = s->tokenize_s;
    res->encode_s = s->encode_s;
    res->write_s = s->collect_s;
    res->recording_s = s->recording_s;
    res->tokens = s->tokens;
    res->video_tokens = s->video_tokens;
    res->audio_tokens = s->audio_tokens;
    res->flops = s->flops;
    res->rank_mb = s->rank_mb;
    res->rss_mb = s->rss_mb;
    res->wait_s = s->wait_s;
}

/* One claimed input on the group; res filled on every rank (rank 0's counts). */
static rv_vote_outcome embed_one(embed_rank *k, claim *c, embed_result *res)
{
    const embed_input *in = &k->b->in[c->index];
    rv_embed_stats stats;
    rv_embed_output *out = NULL;
    memset(res, 0, sizeof *res);
    memset(&stats, 0, sizeof stats);
    res->group = k->group;
    if (c->skip) { /* group rank 0's --resume decision, shared by the claim's vote */
        res->status = EMBED_SKIPPED;
        return RV_VOTE_OK;
    }
    rv_vote_outcome v = rv_embed_run(k->job, c->in, &stats);
    if (v == RV_VOTE_OK)
        v = rv_embed_collect(k->job, c->in, in->output, &out, &stats);
    take_stats(res, &stats);
    if (v == RV_VOTE_FAILED || v == RV_VOTE_BROKEN) {
        res->status = EMBED_FAILED;
        snprintf(res->error, sizeof res->error, "%s", rv_last_error());
    }
    if (v == RV_VOTE_OK && out) { /* group rank 0 */
        const double t = rv_clock_s();
        if (write_output(out, in->output) != RV_OK) {
            res->status = EMBED_FAILED;
            snprintf(res->error, sizeof res->error, "writing %s: %s", in->output,
                     rv_last_error());
        }
        rv_embed_beat(k->job);
        res->write_s += rv_clock_s() - t;
        res->seconds += rv_clock_s() - t;
    }
    rv_embed_output_free(&out);
    rv_embed_input_free(&c->in);
    return v;
}

/* The group's loop over its inputs; returns the last outcome, with fatal_msg
 * filled on a broken group. */
static rv_vote_outcome run_inputs(embed_rank *k, char *fatal_msg, size_t msg_size)
{
    const int slots = k->set->opts.prefetch + 1;
    claim *q = calloc((size_t)slots, sizeof *q);
    rv_vote vote = {0};
    embed_result res;
    int head = 0, held = 0, no_more = 0;
    rv_vote_outcome out = RV_VOTE_OK;
    if (!q) {
        rv_fail(RV_ERR_NOMEM, "rank %d: out of memory", k->rank);
        out = rv_embed_vote(k->job, RV_ERR_NOMEM, NULL, 0, &vote);
        out = out == RV_VOTE_STOP ? out : RV_VOTE_BROKEN;
        snprintf(fatal_msg, msg_size, "%s", rv_last_error());
        goto end;
    }
    for (;;) {
        /* Claim until the encoder's input and --prefetch more are held. */
        while (!no_more && held < slots) {
            claim *c = &q[(head + held) % slots];
            if ((out = claim_next(k, &vote, c)) != RV_VOTE_OK)
                goto end;
            if (c->index < 0)
                no_more = 1;
            else
                held++;
        }
        if (held == 0)
            break;
        claim *c = &q[head];
        head = (head + 1) % slots;
        held--;
        const int index = c->index;
        out = embed_one(k, c, &res);
        if (out == RV_VOTE_STOP)
            break;
        if (out == RV_VOTE_FAILED) /* the input failed; the batch goes on */
            out = RV_VOTE_OK;
        if (k->rank == 0 && embed_dispatch_done(k->disp, index, &res) != RV_OK &&
            out == RV_VOTE_OK) {
            snprintf(fatal_msg, msg_size, "%s", rv_last_error());
            out = RV_VOTE_BROKEN;
        }
        if (out == RV_VOTE_BROKEN) {
            if (!fatal_msg[0])
                snprintf(fatal_msg, msg_size, "%s", res.error);
            break;
        }
    }
end:
    if (out == RV_VOTE_BROKEN && !fatal_msg[0])
        snprintf(fatal_msg, msg_size, "%s", rv_last_error());
    for (int i = 0; q && i < slots; i++)
        rv_embed_input_free(&q[i].in);
    free(q);
    rv_vote_release(&vote);
    return out;
}

rv_status embed_batch_rank(rv_comm *world, void *arg)
{
    embed_batch *b = arg;
    const embed_settings *set = b->set;
    const int C = set->ranks;
    embed_rank k = {.b = b, .set = set, .world_rank = world->rank, .group = world->rank / C,
                    .groups = world->size / C};
    /* The batch is this rank's to fill: world rank 0's, or every process's own
     * copy under MPI (local ranks share world rank 0's). */
    const int own = world->rank == 0 || set->mpi;
    const rv_embed_model model = {.model = set->model, .name = set->model_name,
                                  .random_weights = set->random_weights};
    const rv_embed_hooks hooks = {.user = &k, .stage = on_stage, .plan = on_plan,
                                  .tokens = on_tokens, .stop = on_stop};
    char fatal_msg[sizeof b->fatal_msg] = "";
    rv_vote_outcome out = RV_VOTE_OK;
    rv_vote vote = {0};
    rv_comm *comm = NULL;
    rv_status st = rv_comm_set_timeout(world, set->opts.timeout_s);
    if (st == RV_OK)
        st = rv_comm_split(world, k.group, world->rank, &comm);
    if (st == RV_OK) {
        k.comm = comm;
        k.rank = comm->rank;
        k.size = comm->size;
        st = embed_dispatch_create(world, &k, &k.disp);
    }
    if (st != RV_OK) {
        /* Cannot vote: the others fail on this rank's departure (local), or
         * once it has been silent for --timeout. */
        out = RV_VOTE_BROKEN;
        snprintf(fatal_msg, sizeof fatal_msg, "%s", rv_last_error());
        goto end;
    }
    if ((out = rv_embed_open(&model, comm, &set->opts, &hooks, &k.job)) != RV_VOTE_OK) {
        if (out == RV_VOTE_FAILED) /* a rank cannot set up: nothing can run */
            out = RV_VOTE_BROKEN;
        snprintf(fatal_msg, sizeof fatal_msg, "%s", rv_last_error());
        goto end;
    }
    if (embed_dispatch_start(k.disp) != RV_OK) {
        out = RV_VOTE_BROKEN;
        snprintf(fatal_msg, sizeof fatal_msg, "%s", rv_last_error());
        goto end;
    }
    out = run_inputs(&k, fatal_msg, sizeof fatal_msg);
end:
    /* Started late if set-up failed here: the other groups are still told. */
    embed_dispatch_start(k.disp);
    if (k.disp) {
        /* The group is finished: rank 0 says so and learns the batch's counts
         * once every group is; the group shares them (a broken group cannot). */
        embed_counts c = {0};
        if (k.rank == 0 &&
            embed_dispatch_finish(k.disp, out == RV_VOTE_BROKEN, out == RV_VOTE_STOP, fatal_msg,
                                  &c) != RV_OK && out != RV_VOTE_BROKEN) {
            out = RV_VOTE_BROKEN;
            snprintf(fatal_msg, sizeof fatal_msg, "%s", rv_last_error());
        }
        if (out != RV_VOTE_BROKEN && k.job) {
            rv_vote_outcome last = rv_embed_vote(k.job, RV_OK, &c, sizeof c, &vote);
            if (last == RV_VOTE_BROKEN || last == RV_VOTE_FAILED) {
                out = RV_VOTE_BROKEN;
                snprintf(fatal_msg, sizeof fatal_msg, "%s", rv_last_error());
            } else if (own) {
                const embed_counts *r0 = rv_vote_payload(&vote, 0);
                b->counts[EMBED_OK] = r0->ok;
                b->counts[EMBED_FAILED] = r0->failed;
                b->counts[EMBED_SKIPPED] = r0->skipped;
                b->done = r0->ok + r0->failed + r0->skipped;
                b->fatal |= r0->fatal != 0;
                b->stopped |= r0->stopped != 0 || last == RV_VOTE_STOP;
            }
        }
    }
    if (own) {
        b->fatal |= out == RV_VOTE_BROKEN;
        b->stopped |= out == RV_VOTE_STOP;
        if (out == RV_VOTE_BROKEN && !b->fatal_msg[0])
            snprintf(b->fatal_msg, sizeof b->fatal_msg, "%s", fatal_msg);
    }
    rv_vote_release(&vote);
    rv_embed_close(&k.job);
    embed_dispatch_free(&k.disp);
    rv_comm_free(&comm);
    /* The outcome is in the batch; the run itself went as far as it could. */
    return RV_OK;
}
