/* finetune_loop.c: one rank of `ringvit finetune`. The world's ranks form a
 * dp x cp mesh (rv_comm_mesh_split): each cp group shares one recording's
 * sequence, each dp group index takes its own recordings of the global batch.
 * Every rank holds its own copy of the parameters, the gradient buffers and the
 * optimizer state, and applies the same update, so the copies stay identical
 * (--check-sync compares their hashes).
 *
 * One step on every rank:
 *   for a < accum: the recording at data position s*dp*accum + g*accum + a
 *     (g: this rank's dp index) is tokenized (this rank's slice; cached), the cp
 *     group votes on it, then forward_train -> loss (classify: pool + cross-
 *     entropy; mae: hidden tokens from (seed, data position), reconstruction)
 *     with scale 1 / (dp * accum) -> backward, adding into the gradients;
 *   rv_train_step: all-reduce (F32 sum) the gradients (model, head) over the
 *   cp group, then over the dp group; global norm; clip; AdamW on [model |
 *   head] (one state; the head may have its own learning rate);
 *   a world vote on the step's statistics, failures and stop requests.
 * World rank 0 logs, evaluates the results of the eval pass (every dp group
 * evaluates its share of the validation set), writes checkpoints and the
 * output, and the others learn the outcome by a vote, so a failure anywhere
 * ends every rank at the same point. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "finetune.h"
#include "out_path.h"
#include "rv_backend.h"
#include "rv_clock.h"
#include "rv_comm_watch.h"

typedef struct ft_rank {
    ft_job *job;
    const ft_settings *set;
    rv_comm *world;
    rv_comm *cp, *dp;          /* --timeout deadlines (forward, backward, all-reduce) */
    rv_comm *cp_dev;           /* the cp group for the encoder's device buffers when cp
                                * cannot take them (MPI with --device cuda): NCCL
                                * bootstrapped over cp, or cp staged; NULL: cp */
    rv_comm_watch *w_world;    /* the votes between stages: a wait lasts as long as the */
    rv_comm_watch *w_cp;       /* peers beat, over the world and within the cp group */
    int rank, cpr, dpr;        /* world rank, index in the cp group, dp index */
    rv_backend *be;
    rv_backend *host;          /* beside a device be: the host backend of the embedding
                                * and its backward (every core), made once; else NULL */
    rv_vit_model *m, *g;       /* parameters, gradients */
    rv_vit_model *wdev;        /* m in be's memory (--device cuda), refreshed after each step */
    rv_train_head *h, *dh;
    rv_adamw *opt;             /* over [model | head] */
    ft_order order;
    ft_slice **cache;          /* (train.n) */
    ft_slice **vcache;         /* (val.n) */
} ft_rank;

void ft_job_error(ft_job *job, int rank, const char *msg)
{
    pthread_mutex_lock(&job->lock);
    if (!job->error[0])
        snprintf(job->error, sizeof job->error, "rank %d: %s", rank, msg);
    pthread_mutex_unlock(&job->lock);
}

/* This rank's own failure: noted for the report, returned. */
static rv_status own_fail(ft_rank *k, rv_status st)
{
    ft_job_error(k->job, k->rank, rv_last_error());
    return st;
}

#define VOTE_MAX 8

/* Sums v (n <= VOTE_MAX) over the watch's ranks in place, in rank order. */
static rv_status vote(rv_comm_watch *w, double *v, int n)
{
    double *all = NULL;
    const int size = rv_comm_watch_size(w);
    if (!(all = malloc(sizeof(double) * VOTE_MAX * (size_t)size)))
        return rv_fail(RV_ERR_NOMEM, "vote: out of memory");
    double mine[VOTE_MAX] = {0};
    memcpy(mine, v, sizeof(double) * (size_t)n);
    rv_status st = rv_comm_watch_allgather(w, mine, all, sizeof mine);
    if (st == RV_OK)
        for (int i = 0; i < n; i++) {
            v[i] = 0;
            for (int r = 0; r < size; r++)
                v[i] += all[VOTE_MAX * r + i];
        }
    free(all);
    return st;
}

/* This rank is still working (tokenizing): beats both watches. */
static void beat(void *arg)
{
    ft_rank *k = arg;
    rv_comm_watch_beat(k->w_world);
    rv_comm_watch_beat(k->w_cp);
}

/* ---- setup ---------------------------------------------------------------------------- */

static rv_status rank_setup(ft_rank *k)
{
    const ft_settings *set = k->set;
    const rv_vit_config *cfg = &set->model0->cfg;
    rv_status st;
    if ((st = rv_comm_mesh_split(k->world, set->cp, &k->cp, &k->dp)) != RV_OK ||
        (st = rv_comm_watch_create(k->world, set->timeout_s, &k->w_world)) != RV_OK ||
        (st = rv_comm_watch_create(k->cp, set->timeout_s, &k->w_cp)) != RV_OK ||
        (st = rv_comm_set_timeout(k->cp, set->timeout_s)) != RV_OK ||
        (st = rv_comm_set_timeout(k->dp, set->timeout_s)) != RV_OK)
        return st;
    k->cpr = k->cp->rank;
    k->dpr = k->dp->rank;
    /* Local ranks: --gpu, else rank % GPUs; a process under MPI: its own GPU. */
    const int gpu = set->gpu >= 0 ? set->gpu : k->rank;
    if ((st = cli_backend_create(set->cuda, set->threads, gpu, &k->be)) != RV_OK ||
        (st = rv_backend_set_precision(k->be, set->precision)) != RV_OK ||
        (st = rv_vit_new(cfg, &k->m)) != RV_OK || (st = rv_vit_new(cfg, &k->g)) != RV_OK ||
        (st = rv_train_head_new(cfg, set->task, set->classes.n, &k->h)) != RV_OK ||
        (st = rv_train_head_new(cfg, set->task, set->classes.n, &k->dh)) != RV_OK)
        return st;
    memcpy(k->m->arena, set->model0->arena, sizeof(float) * k->m->arena_floats);
    memcpy(k->h->arena, set->head0->arena, sizeof(float) * k->h->arena_floats);
    if (set->cuda && (st = rv_vit_to_backend(k->m, k->be, &k->wdev)) != RV_OK)
        return st;
    if (!rv_backend_is_host(k->be) && (st = rv_backend_cpu_create(0, &k->host)) != RV_OK)
        return st;
    /* Under MPI the encoder's cp messages are device memory: NCCL moves them, or
     * MPI through host copies. Losses, pooling and gradients (host) stay on cp. */
    if (set->mpi && set->cuda) {
        if (set->nccl)
            st = rv_comm_nccl_create(k->cp, set->gpu, &k->cp_dev);
        else if ((st = rv_comm_split(k->cp, 0, k->cp->rank, &k->cp_dev)) == RV_OK)
            st = rv_comm_mpi_stage_device(k->cp_dev, cli_device_copy(1));
        if (st == RV_OK)
            st = rv_comm_set_timeout(k->cp_dev, set->timeout_s);
        if (st != RV_OK)
            return st;
    }
    k->cache = calloc((size_t)set->train.n, sizeof *k->cache);
    k->vcache = calloc((size_t)(set->val.n > 0 ? set->val.n : 1), sizeof *k->vcache);
    if (!k->cache || !k->vcache)
        return rv_fail(RV_ERR_NOMEM, "rank %d: out of memory", k->rank);
    if ((st = rv_adamw_new_model(k->m, k->h, &k->opt)) != RV_OK ||
        (st = ft_order_init(&k->order, set->seed, set->train.n)) != RV_OK ||
        (set->adam0 && (st = rv_adamw_copy(k->opt, set->adam0)) != RV_OK))
        return st;
    return RV_OK;
}

static void rank_free(ft_rank *k)
{
    for (int i = 0; k->cache && i < k->set->train.n; i++)
        ft_slice_free(&k->cache[i]);
    for (int i = 0; k->vcache && i < k->set->val.n; i++)
        ft_slice_free(&k->vcache[i]);
    free(k->cache), free(k->vcache);
    ft_order_free(&k->order);
    rv_adamw_free(&k->opt);
    rv_train_head_free(&k->h), rv_train_head_free(&k->dh);
    rv_vit_free(&k->m), rv_vit_free(&k->g);
    rv_vit_backend_free(k->be, &k->wdev);
    rv_backend_free(&k->host);
    rv_backend_free(&k->be);
    rv_comm_free(&k->cp_dev);
    rv_comm_free(&k->cp), rv_comm_free(&k->dp);
    rv_comm_watch_free(&k->w_world), rv_comm_watch_free(&k->w_cp);
}

/* ---- one recording -------------------------------------------------------------------- */

/* The recording's slice (from the cache, or loaded), agreed on by the cp group:
 * *ok = 0 when some rank of the group could not make its slice (this rank's
 * own failure is noted in the job). A failed vote (communication) is returned. */
static rv_status get_slice(ft_rank *k, ft_slice **cache, const ft_item *it, ft_slice **out,
                           int *owned, int *ok)
{
    rv_status st = RV_OK;
    ft_slice *s = cache[0];
    *owned = 0;
    if (!s) {
        rv_clear_error();
        st = ft_slice_load(it->path, &k->set->to, &k->set->io,
                           k->set->causal && k->set->span.kind == RV_SPAN_FULL, k->set->cp,
                           k->cpr, beat, k, &s);
        if (st != RV_OK)
            own_fail(k, st);
        else if (k->set->cache)
            cache[0] = s;
        else
            *owned = 1;
    }
    double bad = st != RV_OK;
    rv_status vs = vote(k->w_cp, &bad, 1);
    *ok = vs == RV_OK && bad == 0;
    if (!*ok && *owned)
        ft_slice_free(&s);
    *out = *ok ? s : NULL;
    if (!*ok)
        *owned = 0;
    return vs;
}

/* The seed of the tokens hidden at data position pos (mae). */
static uint64_t hide_seed(uint64_t seed, int64_t pos)
{
    return ft_mix64(ft_mix64(seed ^ 0x68696465ull) + (uint64_t)pos);
}

/* Forward, loss and (train) backward of one recording on the cp group.
 * train: gradients times scale added into k->g and k->dh. Else an evaluation
 * (forward only; val index pos for the mae hiding). */
static rv_status run_one(ft_rank *k, const ft_slice *s, int label, int64_t pos, int train,
                         float scale, double *loss, int *pred)
{
    const ft_settings *set = k->set;
    const int D = k->m->cfg.dim, mae = set->task == RV_TASK_MAE;
    rv_vit_tokens tok = rv_vit_slice_tokens(&s->L, &s->t);
    rv_vit_run run = {.be = k->be, .comm = k->cp_dev ? k->cp_dev : k->cp, .plan = s->t.plan,
                      .strategy = set->strategy,
                      .causal = set->causal, .weights = k->wdev, .span = set->span,
                      .host = k->host};
    const size_t nd = (size_t)(tok.len > 0 ? tok.len : 1) * D;
    float *y = NULL, *dy = NULL;
    uint8_t *hidden = NULL;
    rv_vit_acts *acts = NULL;
    rv_vit_pooled pooled;
    memset(&pooled, 0, sizeof pooled);
    rv_status st;
    *pred = -1;
    /* y and dy are host memory whatever the backend: the heads run on the host. */
    if (!(y = malloc(sizeof(float) * nd)) || (train && !(dy = malloc(sizeof(float) * nd)))) {
        st = rv_fail(RV_ERR_NOMEM, "rank %d: out of memory for %lld tokens' outputs", k->rank,
                     (long long)tok.len);
        goto end;
    }
    if (dy)
        memset(dy, 0, sizeof(float) * nd);
    if (mae) {
        if (!(hidden = malloc((size_t)(tok.len > 0 ? tok.len : 1)))) {
            st = rv_fail(RV_ERR_NOMEM, "rank %d: out of memory", k->rank);
            goto end;
        }
        uint64_t hs = train ? hide_seed(set->seed, pos) : hide_seed(~set->seed, pos);
        rv_mae_hidden(hs, set->mask_ratio, &s->t.plan, k->cpr, &tok, hidden);
    }
    if (train || mae) {
        if ((st = rv_vit_forward_train(k->m, &run, &tok, hidden, mae ? k->h->mask_token : NULL, y,
                                       &acts, NULL)) != RV_OK)
            goto end;
    } else if ((st = rv_vit_forward(k->m, &run, &tok, y, NULL)) != RV_OK) {
        goto end;
    }
    if (mae) {
        int64_t htot = 0;
        st = rv_mae_loss(k->cp, k->h, &tok, hidden, y, scale, loss, &htot, train ? dy : NULL,
                         train ? k->dh : NULL);
    } else {
        rv_vit_pool_opts po = {.segment_s = 1e12, .end_s = s->end_s > 0 ? s->end_s : 1.0};
        if ((st = rv_vit_pool(k->cp, &tok, y, D, &po, &pooled)) != RV_OK)
            goto end;
        st = rv_classify_loss(k->cp, k->h, &tok, &pooled, label, scale, loss, pred,
                              train ? dy : NULL, train ? k->dh : NULL);
    }
    if (st != RV_OK || !train)
        goto end;
    st = rv_vit_backward(k->m, &run, &tok, acts, dy, k->g, mae ? k->dh->mask_token : NULL, NULL);
end:
    rv_vit_acts_free(&acts);
    rv_vit_pooled_free(&pooled);
    free(y);
    free(dy);
    free(hidden);
    return st;
}

/* ---- the optimizer step --------------------------------------------------------------- */

static rv_status sync_and_step(ft_rank *k, double *norm, double *lr)
{
    const ft_settings *set = k->set;
    rv_train_step_opts so = {.model = &set->opt, .head = &set->head_opt};
    rv_train_step_info info;
    rv_status st = rv_train_step(k->opt, k->m, k->g, k->h, k->dh, k->cp, k->dp, &so, &info);
    *norm = info.grad_norm;
    *lr = info.lr;
    if (st != RV_OK) {
        if (isfinite(info.grad_norm))
            return st;
        char msg[512];
        snprintf(msg, sizeof msg, "%s", rv_last_error());
        return rv_fail(st, "%s: lower --lr or raise --warmup", msg);
    }
    /* The device's copy of the weights follows the host's. */
    if (k->wdev && (st = k->be->copy(k->be, k->wdev->arena, k->m->arena,
                                     sizeof(float) * k->m->arena_floats,
                                     RV_COPY_HOST_TO_DEVICE)) != RV_OK)
        return st;
    return RV_OK;
}

/* Every rank's parameters hash the same (--check-sync). */
static rv_status check_sync(ft_rank *k, int64_t step)
{
    char mine[48] = {0}, *all = calloc((size_t)k->world->size, 32);
    rv_status st = RV_OK;
    if (!all)
        return rv_fail(RV_ERR_NOMEM, "check-sync: out of memory");
    rv_vit_hash(k->m, mine);
    /* The head too: fold its bytes into the last 8 characters. */
    uint64_t hh = 0xcbf29ce484222325ull;
    const unsigned char *b = (const unsigned char *)k->h->arena;
    for (size_t i = 0; i < k->h->arena_floats * sizeof(float); i++)
        hh = (hh ^ b[i]) * 0x100000001b3ull;
    snprintf(mine + 16, 17, "%016" PRIx64, hh);
    if ((st = rv_comm_watch_allgather(k->w_world, mine, all, 32)) != RV_OK)
        goto end;
    for (int r = 1; r < k->world->size; r++)
        if (memcmp(all, all + 32 * r, 32) != 0) {
            st = rv_fail(RV_ERR_INTERNAL, "check-sync: after step %" PRId64 " the parameters "
                         "of rank %d (hash %.32s) differ from rank 0's (%.32s): the ranks no "
                         "longer train the same model", step, r, all + 32 * r, all);
            break;
        }
end:
    free(all);
    return st;
}

/* ---- evaluation ----------------------------------------------------------------------- */

/* The validation set: item i on dp group i % dp. Sums over the world. */
static rv_status evaluate(ft_rank *k, double *loss, double *acc, int64_t *count)
{
    const ft_settings *set = k->set;
    double v[4] = {0, 0, 0, 0}; /* loss sum, correct, count, failed */
    rv_status st = RV_OK;
    for (int i = k->dpr; i < set->val.n; i += set->dp) {
        ft_slice *s = NULL;
        int owned = 0, ok = 0, pred = -1;
        double l = 0;
        if ((st = get_slice(k, &k->vcache[i], &set->val.item[i], &s, &owned, &ok)) != RV_OK)
            return st;
        if (!ok) {
            v[3] = 1;
            continue;
        }
        st = run_one(k, s, set->val.item[i].label, i, 0, 1.0f, &l, &pred);
        if (owned)
            ft_slice_free(&s);
        if (st != RV_OK)
            return own_fail(k, st);
        v[0] += l;
        v[1] += pred == set->val.item[i].label;
        v[2] += 1;
    }
    if ((st = vote(k->w_world, v, 4)) != RV_OK)
        return st;
    if (v[3] > 0)
        return rv_fail(RV_ERR_IO, "evaluation: a validation recording could not be read");
    const double cp = set->cp;
    *count = (int64_t)llround(v[2] / cp);
    *loss = *count ? v[0] / cp / (double)*count : 0;
    *acc = *count ? v[1] / cp / (double)*count : 0;
    return RV_OK;
}

/* ---- checkpoints and the output (rank 0 writes, everyone learns) ---------------------- */

static rv_status save_ckpt(ft_rank *k, int64_t step)
{
    const ft_settings *set = k->set;
    rv_status st = RV_OK;
    if (k->rank == 0) {
        rv_ckpt_info info;
        memset(&info, 0, sizeof info);
        info.step = step;
        info.data_pos = step * set->dp * set->accum;
        info.seed = set->seed;
        snprintf(info.settings, sizeof info.settings, "%s", set->settings);
        rv_clear_error();
        char target[4096]; /* a symlink is written through (see out_path.h) */
        st = out_target_path(set->ckpt, target, sizeof target);
        if (st == RV_OK)
            st = rv_ckpt_save(target, k->m, k->h, k->opt, &info);
        if (st != RV_OK)
            own_fail(k, st);
        else {
            snprintf(k->job->res.ckpt_written, sizeof k->job->res.ckpt_written, "%s", set->ckpt);
            ft_report_event(k->job->report, "checkpoint", step, set->ckpt);
        }
    }
    double bad = st != RV_OK;
    rv_status vs = vote(k->w_world, &bad, 1);
    if (vs != RV_OK)
        return vs;
    return bad ? (st != RV_OK ? st : rv_fail(RV_ERR_IO, "rank 0 could not write the checkpoint"))
               : RV_OK;
}

static rv_status write_output(ft_rank *k, int64_t step)
{
    rv_status st = RV_OK;
    if (k->rank == 0) {
        rv_clear_error();
        st = ft_output_write(k->set->out, k->m, k->h, k->set, step);
        if (st != RV_OK)
            own_fail(k, st);
        else
            k->job->res.output_written = 1;
    }
    double bad = st != RV_OK;
    rv_status vs = vote(k->w_world, &bad, 1);
    if (vs != RV_OK)
        return vs;
    return bad ? (st != RV_OK ? st : rv_fail(RV_ERR_IO, "rank 0 could not write the output"))
               : RV_OK;
}

/* ---- the loop ------------------------------------------------------------------------- */

static rv_status run_eval(ft_rank *k, int64_t step, double epoch)
{
    double loss = 0, acc = 0, t0 = rv_clock_s();
    int64_t count = 0;
    rv_status st = evaluate(k, &loss, &acc, &count);
    if (st != RV_OK)
        return st;
    if (k->rank == 0) {
        ft_result *r = &k->job->res;
        r->evaluated = 1;
        r->val_loss = loss;
        r->val_acc = k->set->task == RV_TASK_CLASSIFY ? acc : -1;
        r->val_count = count;
        ft_report_eval(k->job->report, step, epoch, loss, r->val_acc, count, rv_clock_s() - t0);
    }
    return RV_OK;
}

static rv_status train(ft_rank *k)
{
    const ft_settings *set = k->set;
    const int64_t batch = (int64_t)set->dp * set->accum, n = set->train.n;
    const int64_t end = set->stop_at > 0 && set->stop_at < set->steps ? set->stop_at : set->steps;
    const float scale = (float)(1.0 / (double)batch);
    const int do_eval = set->val.n > 0;
    int evaluated_last = 0, stopped = 0;
    rv_status st = RV_OK;
    double t_start = rv_clock_s();
    int64_t step = set->step0;
    for (; step < end; step++) {
        double t0 = rv_clock_s();
        rv_vit_grad_zero(k->g);
        memset(k->dh->arena, 0, sizeof(float) * k->dh->arena_floats);
        double v[5] = {0, 0, 0, 0, 0}; /* loss sum, correct, tokens, failed, stop */
        for (int a = 0; a < set->accum; a++) {
            const int64_t pos = step * batch + (int64_t)k->dpr * set->accum + a;
            const int idx = ft_order_at(&k->order, pos);
            const ft_item *it = &set->train.item[idx];
            ft_slice *s = NULL;
            int owned = 0, ok = 0, pred = -1;
            double loss = 0;
            if ((st = get_slice(k, &k->cache[idx], it, &s, &owned, &ok)) != RV_OK)
                return st;
            if (!ok) {
                v[3] = 1;
                continue;
            }
            st = run_one(k, s, it->label, pos, 1, scale, &loss, &pred);
            v[2] += (double)s->L.seq;
            if (owned)
                ft_slice_free(&s);
            if (st != RV_OK)
                return own_fail(k, st);
            v[0] += loss;
            v[1] += pred == it->label;
        }
        double norm = 0, lr = 0;
        if ((st = sync_and_step(k, &norm, &lr)) != RV_OK)
            return own_fail(k, st);
        v[4] = ft_stop_signal != 0;
        if ((st = vote(k->w_world, v, 5)) != RV_OK)
            return st;
        if (v[3] > 0)
            return rv_fail(RV_ERR_IO, "step %" PRId64 ": a training recording could not be read",
                           step + 1);
        /* Every rank holds the summed loss: all stop together, before a checkpoint of
         * this step is written. */
        if (!isfinite(v[0]))
            return rv_fail(RV_ERR_INVALID,
                           "step %" PRId64 ": the loss is not finite (%g): lower --lr or raise "
                           "--warmup; nothing of this step is saved",
                           step + 1, v[0]);
        const int64_t done = step + 1;
        const double epoch = (double)(done * batch) / (double)n;
        if (k->rank == 0) {
            ft_step_rec rec = {.step = done, .epoch = epoch,
                               .loss = v[0] / set->cp / (double)batch, .lr = lr, .grad_norm = norm,
                               .tokens = (int64_t)llround(v[2] / set->cp),
                               .seconds = rv_clock_s() - t0,
                               .accuracy = set->task == RV_TASK_CLASSIFY
                                               ? v[1] / set->cp / (double)batch
                                               : -1};
            ft_report_step(k->job->report, &rec);
            k->job->res.last_loss = rec.loss;
            k->job->res.tokens += (double)rec.tokens;
            k->job->res.steps_done = done;
        }
        if (set->check_sync > 0 && done % set->check_sync == 0 &&
            (st = check_sync(k, done)) != RV_OK)
            return own_fail(k, st);
        /* The end of an epoch: evaluate. */
        evaluated_last = 0;
        if (do_eval && (done * batch) / n > (step * batch) / n) {
            if ((st = run_eval(k, done, epoch)) != RV_OK)
                return st;
            evaluated_last = 1;
        }
        const int stop =
            v[4] > 0 || (set->stop_at > 0 && done == set->stop_at && done < set->steps);
        if (set->ckpt && ((set->save_every > 0 && done % set->save_every == 0) || stop) &&
            (st = save_ckpt(k, done)) != RV_OK)
            return st;
        if (stop) {
            stopped = v[4] > 0 ? 2 : 1;
            step++;
            break;
        }
    }
    if (k->rank == 0) {
        k->job->res.steps_done = step;
        k->job->res.seconds = rv_clock_s() - t_start;
        k->job->res.stopped = stopped;
    }
    if (stopped)
        return RV_OK;
    if (do_eval && !evaluated_last && (st = run_eval(k, step, (double)(step * batch) / n)) != RV_OK)
        return st;
    return write_output(k, step);
}

rv_status ft_rank_main(rv_comm *world, void *arg)
{
    ft_job *job = arg;
    ft_rank k;
    memset(&k, 0, sizeof k);
    k.job = job;
    k.set = job->set;
    k.world = world;
    k.rank = world->rank;
    rv_status st = rank_setup(&k);
    if (st != RV_OK) {
        own_fail(&k, st);
        goto end;
    }
    st = train(&k);
end:
    rank_free(&k);
    return st;
}
