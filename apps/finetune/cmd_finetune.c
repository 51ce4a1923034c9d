/* cmd_finetune.c: `ringvit finetune`, training the encoder with a task head
 * (classify: a linear head on the pooled embedding; mae: masked reconstruction)
 * on the recordings of a manifest, with context parallelism (--cp) inside each
 * recording and data parallelism (--dp) across recordings. Parses the flags,
 * reads the manifests, sets up the model (a preset with seeded weights, a
 * weights file, or the checkpoint of --resume) and the settings JSON that
 * defines the trajectory, checks a resumed checkpoint against it (naming the
 * field that differs), and runs the ranks (finetune_loop.c): threads of this
 * process (--backend local) or the processes of an MPI job (--backend mpi, or
 * nccl: one GPU per process, the cp group's activations moved by NCCL).
 *
 * Exit status: 0 trained (or stopped by --stop-at with a checkpoint), 1 runtime
 * failure, 2 usage error, 128 + N stopped by signal N (a checkpoint is written
 * first when there is a checkpoint path). */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "apps.h"
#include "cli.h"
#include "cli_flags.h"
#include "out_path.h"
#include "finetune.h"
#include "ingest_cli.h"
#include "model_cli.h"
#include "rv_backend.h"

#define CMD FT_CMD

static const char help_text[] =
    "usage: ringvit finetune --task classify|mae --manifest LIST -o OUT [--val LIST]\n"
    "                        [--model M] [--cp N] [--dp M] [--backend local|mpi|nccl]\n"
    "                        [--device cpu|cuda] [--epochs E | --steps K] [--lr LR]\n"
    "                        [--resume CKPT] [options]\n"
    "\n"
    "Trains the encoder on the recordings of a manifest with a task head: classify\n"
    "(a linear head on the mean of the tokens' outputs, cross-entropy; lines\n"
    "'path<TAB>label') or mae (masked reconstruction of hidden tokens; lines 'path').\n"
    "Each recording's sequence is split over the N ranks of a context-parallel group,\n"
    "M groups train on different recordings and the gradients are summed over both;\n"
    "the data order is seeded: the same settings give the same losses and weights,\n"
    "and --resume continues a run where it stopped.\n"
    "\n"
    "data and task:\n"
    "  --task T            classify or mae (required)\n"
    "  --manifest FILE     training recordings (required)\n"
    "  --val FILE          validation recordings, evaluated at the end of every epoch\n"
    "                      and at the end\n"
    "  --mask-ratio F      mae: fraction of tokens hidden (default 0.75)\n"
    "  --fps F             video frames sampled per second (default 2)\n"
    "  --size N            frame side, px (default: the model's; a multiple of the\n"
    "                      patch)\n"
    "  --no-cache          decode every recording again each epoch (default: each\n"
    "                      rank keeps its tokens in memory)\n"
    "\n"
    "model and output:\n"
    "  --model M           what to start from: a Hugging Face model folder, a weights\n"
    "                      file or a preset (tiny, small, base: random weights;\n"
    "                      default tiny)\n"
    "  --seed N            seed of the data order, the hidden tokens, the head and a\n"
    "                      preset's weights (default 0)\n"
    "  -o, --output FILE   the tuned weights (required; 'ringvit embed --model' reads\n"
    "                      them)\n"
    "  --log FILE          JSON-lines log, one object per step and evaluation\n"
    "                      (default OUT.log.jsonl, OUT without .safetensors)\n"
    "\n"
    "optimisation (AdamW, linear warm-up then cosine decay to --min-lr):\n"
    "  --epochs E          passes over the manifest (default 1)\n"
    "  --steps K           optimizer steps instead of --epochs\n"
    "  --lr LR             peak learning rate (default 1e-4)\n"
    "  --head-lr LR        the task head's peak learning rate (default --lr)\n"
    "  --min-lr LR         learning rate at the last step (default 0)\n"
    "  --wd WD             decoupled weight decay on the matrices (default 0.05)\n"
    "  --warmup K          warm-up steps (default 0)\n"
    "  --clip C            global gradient-norm clip (default 1; 0 disables)\n"
    "  --accum A           recordings per dp group and step (default 1)\n"
    "\n"
    "checkpoints:\n"
    "  --save-every K      write a checkpoint every K steps (default: none)\n"
    "  --ckpt FILE         its path (default OUT.ckpt, OUT without .safetensors)\n"
    "  --resume CKPT       continue from a checkpoint; the settings must be those it\n"
    "                      was written with (a difference is named)\n"
    "  --stop-at K         end after step K with a checkpoint (no output), as if\n"
    "                      interrupted\n"
    "\n"
    "parallelism:\n"
    "  --cp N              ranks per recording (default 1)\n"
    "  --dp M              recordings in parallel (default 1)\n"
    "  --backend B         local (default: N x M threads), mpi or nccl (under\n"
    "                      mpiexec -n N*M, one rank per process; nccl with --device\n"
    "                      cuda, full attention only)\n"
    "  --device D          cpu (default) or cuda: the blocks' forward and backward\n"
    "                      run on the GPU\n"
    "  --precision P       auto (default: f32 on cpu, bf16 on cuda), f32 or bf16 (cpu:\n"
    "                      AVX-512 BF16 or AMX; the GEMMs' and attention's operands)\n"
    "  --gpu N             the GPU of every rank of this process (--device cuda;\n"
    "                      default: the launcher's local rank % GPUs)\n"
    "  --strategy S        ring (default), allgather or ulysses (heads % N == 0)\n"
    "  --causal            causal attention\n"
    "  --attention A       full (default), window=SECONDS, block=SECONDS or frame\n"
    "  --threads N         compute threads in all (local) or per process (mpi);\n"
    "                      default: every core; at most 1024\n"
    "  --timeout SEC       how long a rank waits for a silent peer (default 120)\n"
    "  --check-sync K      debug: every K steps check every rank holds the same\n"
    "                      weights (default: never)\n"
    "\n"
    "reporting:\n"
    "  -q, --quiet         nothing on standard error but errors\n"
    "  --json              a JSON summary on standard output at the end\n"
    "\n"
    "Exit status: 0 trained (or stopped by --stop-at), 1 runtime failure, 2 usage,\n"
    "128+N stopped by signal N (after a checkpoint of the current step).\n"
    "\n"
    "examples:\n"
    "  ringvit finetune --task classify --manifest train.tsv --val val.tsv \\\n"
    "      --epochs 5 --lr 3e-4 --cp 2 --dp 2 -o tuned.safetensors\n"
    "  ringvit finetune --task mae --manifest clips.txt --steps 1000 \\\n"
    "      --save-every 100 -o mae.safetensors\n"
    "  mpiexec -n 8 ringvit finetune --backend nccl --device cuda --cp 8 --task mae \\\n"
    "      --manifest clips.txt --steps 1000 -o mae.safetensors\n"
    "\n"
    "More: docs/finetune.md (tasks, data order, checkpoints, resume), docs/models.md,\n"
    "docs/parallelism.md (MPI, GPUs), docs/attention-spans.md (spans)\n";

typedef struct ft_args {
    const char *task, *manifest, *val, *model, *out, *log, *ckpt, *resume, *backend, *device;
    rv_precision precision; /* --precision (auto: the device's own) */
    int cp, dp, dp_set, accum, threads, causal, no_cache, quiet, json, check_sync;
    int gpu; /* --gpu, or -1 */
    rv_span span;
    int size_set, model_set;
    rv_cp_strategy strategy;
    double epochs, timeout_s, mask_ratio, head_lr;
    int epochs_set;
    int64_t steps, save_every, stop_at, seed;
    rv_ingest_opts io; /* --fps (default 2), --size */
    rv_adamw_opts opt;
} ft_args;

static int parse_args(int argc, char **argv, ft_args *a)
{
    memset(a, 0, sizeof *a);
    a->model = "tiny";
    a->backend = "local";
    a->device = "cpu";
    a->cp = a->dp = a->accum = 1;
    a->gpu = -1;
    a->strategy = RV_CP_RING;
    a->epochs = 1;
    a->mask_ratio = 0.75;
    a->head_lr = -1;
    rv_ingest_opts_default(&a->io);
    a->io.fps_num = 2;
    rv_adamw_opts_default(&a->opt);
    if (rv_comm_default_timeout(&a->timeout_s) != RV_OK)
        a->timeout_s = RV_COMM_DEFAULT_TIMEOUT_S;
    const int64_t max_steps = (int64_t)1 << 40;
    const cli_flag flags[] = {
        {.name = "--task", .kind = RV_CLI_TEXT, .dst = &a->task},
        {.name = "--manifest", .kind = RV_CLI_TEXT, .dst = &a->manifest},
        {.name = "--val", .kind = RV_CLI_TEXT, .dst = &a->val},
        {.name = "--model", .kind = RV_CLI_TEXT, .dst = &a->model, .seen = &a->model_set},
        {.name = "--output", .alias = "-o", .kind = RV_CLI_TEXT, .dst = &a->out},
        {.name = "--log", .kind = RV_CLI_TEXT, .dst = &a->log},
        {.name = "--ckpt", .kind = RV_CLI_TEXT, .dst = &a->ckpt},
        {.name = "--resume", .kind = RV_CLI_TEXT, .dst = &a->resume},
        {.name = "--backend", .kind = RV_CLI_CUSTOM, .dst = &a->backend, .take = cli_take_backend},
        {.name = "--device", .kind = RV_CLI_DEVICE, .dst = &a->device},
        {.name = "--precision", .kind = RV_CLI_PRECISION, .dst = &a->precision},
        {.name = "--gpu", .kind = RV_CLI_INT, .dst = &a->gpu, .lo = 0, .hi = 1023},
        {.name = "--strategy", .kind = RV_CLI_CUSTOM, .dst = &a->strategy,
         .take = cli_take_strategy},
        {.name = "--seed", .kind = RV_CLI_I64, .dst = &a->seed, .lo = 0, .hi = INT64_MAX},
        {.name = "--cp", .kind = RV_CLI_INT, .dst = &a->cp, .lo = 1, .hi = 1024},
        {.name = "--dp", .kind = RV_CLI_INT, .dst = &a->dp, .lo = 1, .hi = 1024,
         .seen = &a->dp_set},
        {.name = "--accum", .kind = RV_CLI_INT, .dst = &a->accum, .lo = 1, .hi = 1 << 20},
        {.name = "--threads", .kind = RV_CLI_INT, .dst = &a->threads, .lo = 1,
         .hi = RV_CLI_MAX_THREADS},
        {.name = "--epochs", .kind = RV_CLI_DOUBLE, .dst = &a->epochs, .lo = 1e-9, .hi = 1e9,
         .seen = &a->epochs_set},
        {.name = "--steps", .kind = RV_CLI_I64, .dst = &a->steps, .lo = 1, .hi = max_steps},
        {.name = "--lr", .kind = RV_CLI_DOUBLE, .dst = &a->opt.lr, .lo = 0, .hi = 10},
        {.name = "--head-lr", .kind = RV_CLI_DOUBLE, .dst = &a->head_lr, .lo = 0, .hi = 10},
        {.name = "--min-lr", .kind = RV_CLI_DOUBLE, .dst = &a->opt.min_lr, .lo = 0, .hi = 10},
        {.name = "--wd", .kind = RV_CLI_DOUBLE, .dst = &a->opt.wd, .lo = 0, .hi = 10},
        {.name = "--warmup", .kind = RV_CLI_I64, .dst = &a->opt.warmup, .lo = 0, .hi = max_steps},
        {.name = "--clip", .kind = RV_CLI_DOUBLE, .dst = &a->opt.clip, .lo = 0, .hi = 1e9},
        {.name = "--mask-ratio", .kind = RV_CLI_DOUBLE, .dst = &a->mask_ratio, .lo = 0.001,
         .hi = 1},
        RV_CLI_INGEST_FPS(&a->io),
        RV_CLI_INGEST_SIZE(&a->io, &a->size_set),
        {.name = "--save-every", .kind = RV_CLI_I64, .dst = &a->save_every, .lo = 1,
         .hi = max_steps},
        {.name = "--stop-at", .kind = RV_CLI_I64, .dst = &a->stop_at, .lo = 1, .hi = max_steps},
        {.name = "--check-sync", .kind = RV_CLI_INT, .dst = &a->check_sync, .lo = 1, .hi = 1 << 30},
        {.name = "--timeout", .kind = RV_CLI_DOUBLE, .dst = &a->timeout_s, .lo = 0.001, .hi = 1e7},
        {.name = "--causal", .kind = RV_CLI_SWITCH, .dst = &a->causal},
        {.name = "--attention", .kind = RV_CLI_CUSTOM, .dst = &a->span, .take = cli_take_span},
        {.name = "--no-cache", .kind = RV_CLI_SWITCH, .dst = &a->no_cache},
        {.name = "--quiet", .alias = "-q", .kind = RV_CLI_SWITCH, .dst = &a->quiet},
        {.name = "--json", .kind = RV_CLI_SWITCH, .dst = &a->json},
    };
    int rc = cli_flags_parse(CMD, argc, argv, flags, RV_CLI_NFLAGS(flags), NULL);
    if (rc)
        return rc;
    if (!a->task)
        return cli_usage_error(CMD, "which task? give --task classify or --task mae");
    rv_task t;
    if (rv_task_parse(a->task, &t) != RV_OK)
        return cli_usage_error(CMD, "--task wants classify or mae, got '%s'", a->task);
    if (!a->manifest)
        return cli_usage_error(CMD, "which recordings? give --manifest TRAIN.tsv");
    if (!a->out || !a->out[0])
        return cli_usage_error(CMD, "where to? give -o TUNED.safetensors");
    if (a->steps && a->epochs_set)
        return cli_usage_error(CMD, "--epochs and --steps both say how long: give one");
    if (a->resume && a->model_set)
        return cli_usage_error(CMD, "--model and --resume: the checkpoint holds the model; "
                                  "leave --model out");
    if (a->opt.min_lr > a->opt.lr)
        return cli_usage_error(CMD, "--min-lr %g is above --lr %g", a->opt.min_lr, a->opt.lr);
    return model_cli_check_backend(CMD, a->backend, strcmp(a->device, "cuda") == 0, a->gpu,
                                   &a->span);
}

/* ---- settings ------------------------------------------------------------------------- */

/* Keys of the settings JSON that do not change the trajectory (informational). */
static int informational(const char *key)
{
    return strcmp(key, "model") == 0 || strcmp(key, "classes") == 0;
}

static char *hex64(uint64_t v, char buf[17])
{
    snprintf(buf, 17, "%016" PRIx64, v);
    return buf;
}

/* The settings JSON that defines the trajectory, into set->settings. */
static int build_settings(const char *model, ft_settings *set)
{
    char h1[17], h2[17], seed[24], fps[32];
    snprintf(seed, sizeof seed, "%" PRIu64, set->seed);
    snprintf(fps, sizeof fps, "%d/%d", set->io.fps_num, set->io.fps_den);
    json_t *j = json_pack(
        "{s:s, s:s, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:I, s:I, s:i, s:i, s:i, s:b, "
        "s:s, s:i, s:s, s:s, s:i, s:s, s:i, s:s}",
        "task", rv_task_name(set->task), "seed", seed, "lr", set->opt.lr, "min_lr",
        set->opt.min_lr, "head_lr", set->head_opt.lr, "wd", set->opt.wd, "clip", set->opt.clip,
        "beta1", set->opt.beta1, "beta2", set->opt.beta2, "eps", set->opt.eps, "warmup",
        (json_int_t)set->opt.warmup, "steps", (json_int_t)set->steps, "accum", set->accum, "dp",
        set->dp, "cp", set->cp, "causal", set->causal, "fps", fps, "size", set->io.size,
        "manifest", set->manifest, "manifest_hash", hex64(set->train.hash, h1), "train_count",
        set->train.n, "model", model, "classes_count", set->classes.n, "classes_hash",
        hex64(ft_classes_hash(&set->classes), h2));
    if (!j) {
        cli_error(CMD ": out of memory (or a path that is not UTF-8)");
        return RV_EXIT_FAIL;
    }
    if (set->task == RV_TASK_MAE)
        json_object_set_new(j, "mask_ratio", json_real(set->mask_ratio));
    if (set->span.kind != RV_SPAN_FULL) { /* absent: full (checkpoints from before spans) */
        char span[64];
        rv_span_format(&set->span, span, sizeof span);
        json_object_set_new(j, "attention", json_string(span));
    }
    json_t *cl = json_array();
    for (int i = 0; cl && i < set->classes.n; i++)
        json_array_append_new(cl, json_string(set->classes.name[i]));
    if (cl)
        json_object_set_new(j, "classes", cl);
    int rc = 0;
    for (int pass = 0; pass < 2; pass++) {
        char *text = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS | JSON_REAL_PRECISION(17));
        size_t n = text ? strlen(text) : 0;
        if (text && n < sizeof set->settings) {
            memcpy(set->settings, text, n + 1);
            free(text);
            goto end;
        }
        free(text);
        json_object_del(j, "classes"); /* the hash still pins them */
    }
    cli_error(CMD ": the settings do not fit the checkpoint's %zu bytes (a very long "
                 "manifest path?)", sizeof set->settings);
    rc = RV_EXIT_FAIL;
end:
    json_decref(j);
    return rc;
}

/* The checkpoint's settings against this run's: the first field that differs. */
static int check_resume_settings(const char *ckpt, const char *theirs, const char *ours)
{
    json_t *a = json_loads(theirs, 0, NULL), *b = json_loads(ours, 0, NULL);
    int rc = 0;
    if (!json_is_object(a) || !json_is_object(b)) {
        rc = cli_usage_error(CMD, "--resume %s: its settings are not a finetune settings "
                                "object", ckpt);
        goto end;
    }
    for (int pass = 0; pass < 2 && !rc; pass++) {
        json_t *x = pass ? b : a, *y = pass ? a : b;
        const char *key;
        json_t *v;
        json_object_foreach(x, key, v) {
            if (informational(key))
                continue;
            json_t *w = json_object_get(y, key);
            if (w && json_equal(v, w))
                continue;
            char *tv = json_dumps(pass ? w : v, JSON_ENCODE_ANY | JSON_REAL_PRECISION(17));
            char *ov = json_dumps(pass ? v : w, JSON_ENCODE_ANY | JSON_REAL_PRECISION(17));
            rc = cli_usage_error(CMD, "--resume %s: the checkpoint was written with %s %s, "
                                    "this run has %s %s; resume with the same settings", ckpt,
                                    key, tv ? tv : "(none)", key, ov ? ov : "(none)");
            free(tv), free(ov);
            break;
        }
    }
end:
    json_decref(a), json_decref(b);
    return rc;
}

/* ---- setup -------------------------------------------------------------------------- */

static int setup_model(const ft_args *a, model_cli *mc)
{
    rv_status st;
    if (a->resume) {
        memset(mc, 0, sizeof *mc);
        if ((st = rv_vit_load(a->resume, NULL, &mc->m)) != RV_OK)
            return cli_fail(st, CMD ": --resume");
        return 0;
    }
    /* --seed seeds more than a preset here (the data order, the head): a file
     * or folder takes it too. */
    return model_cli_open(CMD, a->model, a->seed, 0, 0, 0, 1, mc);
}

/* OUT without a trailing ".safetensors", plus suffix. */
static void derived_path(const char *out, const char *suffix, char *buf, size_t n)
{
    size_t len = strlen(out);
    if (len > 12 && strcmp(out + len - 12, ".safetensors") == 0)
        len -= 12;
    snprintf(buf, n, "%.*s%s", (int)len, out, suffix);
}

static int folder_of_exists(const char *path)
{
    char dir[4200];
    const char *slash = strrchr(path, '/');
    if (!slash)
        return 1;
    snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path);
    struct stat sb;
    return stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* ---- main ----------------------------------------------------------------------------- */

static int summary(const ft_args *a, const ft_settings *set, const ft_job *job, int loud)
{
    const ft_result *r = &job->res;
    if (!loud)
        return RV_EXIT_OK;
    const double tps = r->seconds > 0 ? r->tokens / r->seconds : 0;
    if (!set->quiet) {
        if (r->stopped)
            fprintf(stderr, RV_CLI_PROG ": finetune: stopped at step %" PRId64 " of %" PRId64
                    "%s%s\n", r->steps_done, set->steps,
                    r->ckpt_written[0] ? "; resume with --resume " : " (no checkpoint)",
                    r->ckpt_written);
        else
            fprintf(stderr, RV_CLI_PROG ": finetune: %" PRId64 " steps, final loss %.4f, %.0f "
                    "tokens/s, %.1f s -> %s\n", r->steps_done, r->last_loss, tps, r->seconds,
                    set->out);
        if (!r->stopped && r->evaluated)
            fprintf(stderr, RV_CLI_PROG ": finetune: validation: loss %.4f%s%.4f over %" PRId64
                    " recordings\n", r->val_loss,
                    set->task == RV_TASK_CLASSIFY ? ", accuracy " : "",
                    set->task == RV_TASK_CLASSIFY ? r->val_acc : 0.0, r->val_count);
    }
    if (!a->json)
        return RV_EXIT_OK;
    json_t *j = json_pack("{s:s, s:s, s:I, s:I, s:f, s:f, s:f, s:b, s:s?, s:s?}", "task",
                          rv_task_name(set->task), "output", set->out, "steps",
                          (json_int_t)r->steps_done, "total_steps", (json_int_t)set->steps,
                          "loss", r->last_loss, "seconds", r->seconds, "tokens_per_s", tps,
                          "stopped", r->stopped != 0, "checkpoint",
                          r->ckpt_written[0] ? r->ckpt_written : NULL, "log", set->log);
    if (j && r->evaluated) {
        json_object_set_new(j, "val_loss", json_real(r->val_loss));
        json_object_set_new(j, "val_count", json_integer(r->val_count));
        if (set->task == RV_TASK_CLASSIFY)
            json_object_set_new(j, "val_accuracy", json_real(r->val_acc));
    }
    if (j && set->task == RV_TASK_CLASSIFY) {
        json_t *cl = json_array();
        for (int i = 0; cl && i < set->classes.n; i++)
            json_array_append_new(cl, json_string(set->classes.name[i]));
        json_object_set_new(j, "classes", cl);
    }
    if (!j) {
        cli_error(CMD ": out of memory");
        return RV_EXIT_FAIL;
    }
    int rc = cli_json_print(j);
    json_decref(j);
    return rc;
}

static int finetune_main(int argc, char **argv)
{
    ft_args a;
    ft_settings set;
    ft_job job;
    rv_vit_model *model = NULL;
    model_cli mc;
    memset(&mc, 0, sizeof mc);
    rv_train_head *head = NULL;
    rv_adamw *adam = NULL;
    rv_comm *world = NULL;
    char ckpt_path[4200], log_path[4200];
    int rc, rank = 0;
    rv_status st;
    memset(&set, 0, sizeof set);
    memset(&job, 0, sizeof job);
    pthread_mutex_init(&job.lock, NULL);
    if ((rc = parse_args(argc, argv, &a)) != 0)
        goto end;
    rv_task_parse(a.task, &set.task);
    const int classify = set.task == RV_TASK_CLASSIFY;

    /* Data. */
    if ((rc = ft_data_read(a.manifest, classify, classify ? &set.classes : NULL, NULL,
                           &set.train)) != 0)
        goto end;
    if (classify && set.classes.n < 2) {
        rc = cli_usage_error(CMD, "%s: classify needs at least 2 classes; the manifest has "
                                "%d ('%s')", a.manifest, set.classes.n, set.classes.name[0]);
        goto end;
    }
    if (a.val && (rc = ft_data_read(a.val, classify, NULL, &set.classes, &set.val)) != 0)
        goto end;

    /* The ranks: nccl is an MPI job too (MPI bootstraps NCCL and carries the rest). */
    set.nccl = strcmp(a.backend, "nccl") == 0;
    set.mpi = set.nccl || strcmp(a.backend, "mpi") == 0;
    set.cp = a.cp;
    set.dp = a.dp;
    set.gpu = a.gpu;
    set.cuda = strcmp(a.device, "cuda") == 0;
    set.precision = a.precision;
    if ((st = cli_device_check(set.cuda)) != RV_OK) { /* before any work */
        rc = cli_fail(st, CMD);
        goto end;
    }
    if ((rc = cli_check_precision(CMD, a.device, a.precision)) != 0) {
        goto end;
    }
    if (set.mpi) {
        if (!rv_comm_backend_built("mpi")) {
            rv_fail(RV_ERR_UNSUPPORTED, "this build has no MPI; --backend local runs the ranks "
                    "as threads");
            rc = cli_fail(RV_ERR_UNSUPPORTED, CMD);
            goto end;
        }
        if ((st = rv_comm_mpi_world(&world)) != RV_OK) {
            rc = cli_fail(st, CMD);
            goto end;
        }
        rank = world->rank;
        if (!a.dp_set && world->size % set.cp == 0)
            set.dp = world->size / set.cp;
        if (set.cp * set.dp != world->size) {
            rc = cli_usage_error(CMD, "--cp %d x --dp %d is %d ranks, but mpiexec started %d "
                                    "processes", set.cp, set.dp, set.cp * set.dp, world->size);
            goto end;
        }
        if (set.cuda && /* one GPU per process */
            (rc = model_cli_mpi_gpu(CMD, a.gpu, rank, world->size, a.quiet, set.nccl,
                                    &set.gpu)) != 0)
            goto end;
    } else if (set.cuda && a.gpu >= 0 &&
               (rc = model_cli_gpu(CMD, a.gpu, 0, &set.gpu, NULL, 0)) != 0) {
        goto end;
    } else if (set.cp * set.dp > 1024) {
        rc = cli_usage_error(CMD, "--cp %d x --dp %d is more than 1024 ranks", set.cp, set.dp);
        goto end;
    }

    /* The model and what it decides. */
    if ((rc = setup_model(&a, &mc)) != 0)
        goto end;
    model = mc.m;
    if (!a.quiet)
        model_cli_warn_random(CMD, &mc, a.model);
    const rv_vit_config *cfg = &model->cfg;
    if (rv_cp_strategy_check(a.strategy, cfg->heads, set.cp) != RV_OK) {
        rc = cli_usage_error(CMD, "the model's heads and --cp: %s", rv_last_error());
        goto end;
    }
    /* The tokens the model wants; modalities follow its weights; blocks and
     * frames are the tokenizer's windows (embed does the same). */
    set.io = a.io;
    if (rv_vit_input_opts(cfg, a.size_set ? a.io.size : 0, 0, 0, &a.span, &set.to, &set.io) !=
        RV_OK) {
        rc = cli_usage_error(CMD, "%s", rv_last_error());
        goto end;
    }
    set.manifest = a.manifest;
    set.val_manifest = a.val;
    set.model_name = a.resume ? a.resume : a.model;
    set.out = a.out;
    derived_path(a.out, ".ckpt", ckpt_path, sizeof ckpt_path);
    derived_path(a.out, ".log.jsonl", log_path, sizeof log_path);
    set.ckpt = a.ckpt ? a.ckpt : ckpt_path;
    set.log = a.log ? a.log : log_path;
    set.resume = a.resume;
    set.accum = a.accum;
    set.threads = cli_threads_per_rank(a.threads, set.mpi ? 1 : set.cp * set.dp, set.mpi);
    set.io.threads = set.threads > RV_INGEST_MAX_THREADS ? RV_INGEST_MAX_THREADS : set.threads;
    set.strategy = a.strategy;
    set.causal = a.causal;
    set.span = a.span;
    set.cache = !a.no_cache;
    set.quiet = a.quiet || rank != 0;
    set.json = a.json && rank == 0;
    set.check_sync = a.check_sync;
    set.timeout_s = a.timeout_s;
    set.seed = (uint64_t)a.seed;
    set.mask_ratio = a.mask_ratio;
    set.opt = a.opt;
    const int64_t batch = (int64_t)set.dp * set.accum;
    set.steps = a.steps ? a.steps
                        : (int64_t)ceil(a.epochs * (double)set.train.n / (double)batch - 1e-9);
    if (set.steps < 1)
        set.steps = 1;
    set.opt.total = set.steps;
    set.head_opt = set.opt;
    if (a.head_lr >= 0) {
        /* The same schedule, scaled. */
        set.head_opt.min_lr = set.opt.lr > 0 ? set.opt.min_lr * a.head_lr / set.opt.lr : 0;
        set.head_opt.lr = a.head_lr;
    }
    set.save_every = a.save_every;
    set.stop_at = a.stop_at;
    if (!folder_of_exists(a.out)) {
        cli_error(CMD ": cannot write %s: its folder does not exist", a.out);
        rc = RV_EXIT_FAIL;
        goto end;
    }
    /* Before any training: the output and checkpoint may only replace a regular
     * file (see out_path.h); both are checked again when written. */
    {
        char target[4096];
        if ((st = out_target_path(set.out, target, sizeof target)) != RV_OK ||
            (st = out_target_path(set.ckpt, target, sizeof target)) != RV_OK) {
            rc = cli_fail(st, CMD);
            goto end;
        }
    }
    if ((rc = build_settings(a.model, &set)) != 0)
        goto end;

    /* The head, and the checkpoint of --resume. */
    if ((st = rv_train_head_new(cfg, set.task, set.classes.n, &head)) != RV_OK ||
        (st = rv_train_head_init(head, ft_mix64(set.seed ^ 0x68656164ull))) != RV_OK) {
        rc = cli_fail(st, CMD ": head");
        goto end;
    }
    if (a.resume) {
        rv_ckpt_info info;
        memset(&info, 0, sizeof info);
        if ((st = rv_adamw_new_model(model, head, &adam)) != RV_OK ||
            (st = rv_ckpt_load(a.resume, model, head, adam, &info)) != RV_OK) {
            rc = cli_fail(st, CMD ": --resume");
            goto end;
        }
        if ((rc = check_resume_settings(a.resume, info.settings, set.settings)) != 0)
            goto end;
        /* The model the run started from, as the checkpoint says. */
        json_t *cs = json_loads(info.settings, 0, NULL);
        const char *m0 = json_string_value(json_object_get(cs, "model"));
        rc = build_settings(m0 ? m0 : a.resume, &set);
        json_decref(cs);
        if (rc)
            goto end;
        int64_t want_pos = 0; /* step x batch; the checkpoint's counters are bounded */
        if (__builtin_mul_overflow(info.step, batch, &want_pos) || info.data_pos != want_pos) {
            cli_error(CMD ": --resume %s: data position %" PRId64 " is not step %" PRId64
                         " x %" PRId64 " recordings", a.resume, info.data_pos, info.step, batch);
            rc = RV_EXIT_FAIL;
            goto end;
        }
        if (info.step >= set.steps) {
            rc = cli_usage_error(CMD, "--resume %s: the checkpoint is at step %" PRId64
                                    ", the run has %" PRId64 " steps: nothing left to do",
                                    a.resume, info.step, set.steps);
            goto end;
        }
        set.step0 = info.step;
        set.adam0 = adam;
    }
    if (set.stop_at > 0 && set.stop_at <= set.step0) {
        rc = cli_usage_error(CMD, "--stop-at %" PRId64 " is not after the checkpoint's step "
                                "%" PRId64, set.stop_at, set.step0);
        goto end;
    }
    set.model0 = model;
    set.head0 = head;

    /* Run. */
    job.set = &set;
    if (rank == 0) {
        char ncls[32] = "";
        if (classify)
            snprintf(ncls, sizeof ncls, ", %d classes", set.classes.n);
        if ((st = ft_report_open(&set, set.log, a.resume != NULL, &job.report)) != RV_OK) {
            rc = cli_fail(st, CMD);
            goto end;
        }
        ft_report_event(job.report, a.resume ? "resume" : "start", set.step0, a.resume);
        if (!set.quiet)
            ft_report_message(job.report, "finetune: %s, %d recordings%s%s%s, %" PRId64 " steps "
                              "of %" PRId64 " recordings (dp %d x accum %d), cp %d, %" PRId64
                              " parameters%s", rv_task_name(set.task), set.train.n,
                              set.val.n ? ", val " : "", set.val.n ? a.val : "", ncls, set.steps,
                              batch, set.dp, set.accum, set.cp,
                              rv_vit_params(model) + (int64_t)head->arena_floats,
                              a.resume ? ", resumed" : "");
    }
    cli_on_stop_signals(ft_on_signal);
    if (set.mpi) {
        st = ft_rank_main(world, &job);
    } else {
        st = rv_local_run_copy(set.cp * set.dp, ft_rank_main, &job, cli_device_copy(set.cuda));
    }
    char log_error[320] = "";
    if (ft_report_log_error(job.report))
        snprintf(log_error, sizeof log_error, "%s", ft_report_log_error(job.report));
    ft_report_close(&job.report);
    if (st != RV_OK) {
        if (job.error[0])
            cli_error(CMD ": %s", job.error);
        else if (rank == 0)
            cli_error(CMD ": %s", rv_last_error());
        rc = ft_stop_signal ? 128 + (int)ft_stop_signal : RV_EXIT_FAIL;
        goto end;
    }
    rc = summary(&a, &set, &job, rank == 0);
    if (rc == RV_EXIT_OK && job.res.stopped == 2)
        rc = 128 + (int)ft_stop_signal;
    if (log_error[0] && rc == RV_EXIT_OK) { /* the model is written; its record is not */
        cli_error(CMD ": %s (%s); the outputs are written", log_error, set.log ? set.log : "--log");
        rc = RV_EXIT_FAIL;
    }
end:
    if (world) {
        if (rc == RV_EXIT_FAIL && set.cp * set.dp > 1)
            rv_comm_abort(world, rc);
        rv_comm_free(&world);
        rv_comm_mpi_finalize();
    }
    rv_adamw_free(&adam);
    rv_train_head_free(&head);
    model_cli_close(&mc);
    ft_data_free(&set.train);
    ft_data_free(&set.val);
    ft_classes_free(&set.classes);
    pthread_mutex_destroy(&job.lock);
    return rc;
}

const cli_command cmd_finetune = {
    .name = "finetune",
    .summary = "train the encoder with a task head (finetune --task classify|mae ...)",
    .main = finetune_main,
    .help = help_text,
};
