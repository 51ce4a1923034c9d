/* cmd_embed.c: `ringvit embed INPUT...`, recordings to embeddings. Parses the
 * flags, sets up the model (a preset with seeded random weights, or a weights
 * file), names the outputs, installs the SIGINT/SIGTERM handler, and runs the
 * batch on N ranks: threads of this process (--backend local, the default) or
 * the processes of an MPI job (--backend mpi, or nccl: one GPU per process, the
 * activations moved by NCCL, the votes by MPI). Each rank decodes, tokenizes and
 * encodes only its own part of each recording (the library's embed job,
 * rv_embed.h); rank 0 writes the outputs, the JSON-lines log and the progress.
 *
 * Exit status: 0 every input embedded (or skipped by --resume), 3 some failed,
 * 2 usage error, 1 nothing could run (model, backend, output folder, or the
 * ranks lost each other), 128 + signal number when stopped by SIGINT/SIGTERM. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "apps.h"
#include "cli.h"
#include "cli_flags.h"
#include "embed.h"
#include "ingest_cli.h"
#include "model_cli.h"
#include "out_path.h"
#include "rv_backend.h"
#include "rv_clock.h"

#define CMD "embed"


static const char help_text[] =
    "usage: ringvit embed INPUT... [--manifest LIST] [-o OUT | --out-dir DIR]\n"
    "                     [--model M] [--cp C] [--ranks W] [--backend local|mpi|nccl]\n"
    "                     [--device cpu|cuda] [--attention SPAN] [--fps F] [options]\n"
    "\n"
    "Embeds each recording (video with its audio, a video alone, a still image or an\n"
    "audio file) with the vision transformer, one .safetensors per input: the\n"
    "recording becomes one token sequence, split over the C ranks of a group, each\n"
    "rank decoding only its own time range, and the encoder attends over the whole\n"
    "sequence with context parallelism. With W ranks in all, W / C groups take the\n"
    "next input as each becomes free. The outputs are the same for every W, C and\n"
    "strategy (within 1e-5 relative). A preset's weights are RANDOM: its embeddings\n"
    "show the pipeline works and mean nothing.\n"
    "\n"
    "inputs and outputs:\n"
    "  INPUT...            media files ('-', standard input, is refused)\n"
    "  --manifest LIST     more inputs, one path per line, relative to LIST's folder\n"
    "  -o, --output OUT    the output of a single INPUT; '-': standard output\n"
    "  --out-dir DIR       outputs DIR/NAME.safetensors, the log DIR/" EMBED_LOG_NAME ",\n"
    "                      the list of complete outputs DIR/" EMBED_INDEX_NAME "\n"
    "                      (default: the current folder)\n"
    "  --log FILE          the JSON-lines log there instead (with -o: none unless\n"
    "                      given)\n"
    "  --resume            skip inputs whose complete output exists\n"
    "  --tokens            also write every token's output\n"
    "  --dtype T           the embeddings as f32 (default), f16 or bf16\n"
    "  --normalize         L2-normalise each row of global, segments and tokens\n"
    "  --shard I/N         job I of N jobs started separately that share --out-dir\n"
    "  --claim-stale SEC   a claim not refreshed for SEC seconds is a dead job's and\n"
    "                      is taken over (default 600)\n"
    "\n"
    "model:\n"
    "  --model M           a Hugging Face model folder, a weights file or a preset\n"
    "                      (tiny, small, base: RANDOM weights; default tiny)\n"
    "  --seed N            seed of a preset's weights (default 0)\n"
    "  --heads H           head count of a torchvision-named file (default D / 64)\n"
    "  --tubelet T         frames per video token (default the model's; inflates an\n"
    "                      image model)\n"
    "  --audio, --video    insist on a modality (refused when the model has no\n"
    "                      weights for it)\n"
    "\n"
    "parallelism:\n"
    "  --cp C              ranks of a group, which share one recording (default 1;\n"
    "                      under mpiexec: every process)\n"
    "  --ranks W           ranks in all with --backend local (threads; default C)\n"
    "  --prefetch N        inputs each rank prepares ahead while the encoder works\n"
    "                      (default 1, 0: in turn); memory: N + 1 token slices a rank\n"
    "  --backend B         local (default: threads), mpi or nccl (under mpiexec, one\n"
    "                      rank per process; nccl with --device cuda)\n"
    "  --device D          cpu (default) or cuda\n"
    "  --precision P       auto (default: f32 on cpu, bf16 on cuda), f32 or bf16: the\n"
    "                      GEMMs' and attention's operands (f32 accumulation); bf16 on\n"
    "                      the cpu where it has AVX-512 BF16 or AMX (docs/embed.md)\n"
    "  --gpu N             the GPU of every rank of this process (--device cuda;\n"
    "                      default: the launcher's local rank % GPUs)\n"
    "  --strategy S        ring (default), allgather or ulysses (heads % C == 0)\n"
    "  --causal            causal attention\n"
    "  --attention A       full (default), window=SECONDS, block=SECONDS or frame\n"
    "  --threads N         compute threads in all (local) or per process (mpi);\n"
    "                      default: every core; at most 1024\n"
    "  --decode-threads N  decoder threads per rank (default: its compute threads)\n"
    "  --timeout SEC       how long a rank waits for a silent peer (default 120)\n"
    "\n"
    "sampling:\n"
    "  --fps F             video frames sampled per second (default 1)\n"
    "  --size N            frame side, px (default: the model's)\n"
    "  --segment SECONDS   window of the per-segment means (default 10; block=W: W)\n"
    "  --hop SECONDS       step between segment starts (default: the segment)\n"
    "  --no-audio, --no-video\n"
    "                      leave a modality out\n"
    "  --max-tokens N      refuse an input of more than N tokens, or N segments,\n"
    "                      before decoding it (default 16777216)\n"
    "  --pad, --start S, --duration D, --audio-stream I, --video-stream I,\n"
    "  --max-corrupt N|P%  as for 'ringvit frames' (default --max-corrupt: past both\n"
    "                      32 and 1%)\n"
    "\n"
    "reporting:\n"
    "  -q, --quiet         nothing on standard error but errors\n"
    "  --json              one JSON object per input and line on standard output\n"
    "  --progress SECONDS  in a batch log (stderr not a terminal): a progress line at\n"
    "                      most every SECONDS (default 30; 0: none)\n"
    "\n"
    "Exit status: 0 every input embedded or skipped, 3 some inputs failed (each is\n"
    "logged and the batch goes on), 2 usage, 1 nothing could run (model, backend,\n"
    "output folder), 128+N stopped by signal N.\n"
    "\n"
    "examples:\n"
    "  ringvit embed talk.mp4 --model videomae-base/ --cp 2 -o talk.safetensors\n"
    "  ringvit embed --manifest videos.txt --out-dir emb --resume --json\n"
    "  ringvit embed --manifest clips.txt --out-dir emb --ranks 2 --cp 1\n"
    "  ringvit embed lecture.mp4 --attention window=16 -o lecture.safetensors\n"
    "  ringvit embed --manifest videos.txt --out-dir /shared/emb --resume --shard 0/2\n"
    "  mpiexec -n 8 ringvit embed --backend nccl --device cuda --cp 8 long.mp4 \\\n"
    "      -o long.safetensors\n"
    "\n"
    "More: docs/embed.md (outputs, times, batches, several machines), docs/models.md,\n"
    "docs/parallelism.md (MPI, GPUs), docs/attention-spans.md (spans)\n";

typedef struct embed_args {
    rv_embed_opts o;    /* the job's options, from rv_embed_opts_default and the flags */
    const char *out, *out_dir, *log, *model, *backend;
    const char **manifests;
    int nmanifests;
    const char **inputs;
    int ninputs;
    int cp, cp_set, ranks, seed_set;
    int gpu; /* --gpu, or -1 */
    int heads, tubelet;
    int64_t seed;
    int resume, quiet, json;
    double progress_s;  /* --progress */
    int shard_index, shard_count; /* --shard I/N (count 0: none) */
    double claim_stale_s;         /* --claim-stale (0: not given) */
} embed_args;

/* --shard I/N (into the embed_args at dst): 0 <= I < N. Returns 0 or
 * RV_EXIT_USAGE after a message. */
static int take_shard(const char *cmd, const char *name, const char *v, void *dst)
{
    (void)name;
    embed_args *a = dst;
    char *end = NULL, *end2 = NULL;
    errno = 0;
    long i = v[0] >= '0' && v[0] <= '9' ? strtol(v, &end, 10) : -1;
    long n = end && *end == '/' && end[1] >= '0' && end[1] <= '9' ? strtol(end + 1, &end2, 10) : -1;
    if (errno || i < 0 || n < 1 || n > 1000000 || !end2 || *end2 || i >= n)
        return cli_usage_error(cmd, "--shard wants I/N, this job's number I of N jobs with 0 "
                                  "<= I < N (0/2 and 1/2 for two jobs), got '%s'", v);
    a->shard_index = (int)i;
    a->shard_count = (int)n;
    return 0;
}

/* --manifest LIST, as often as given (into the embed_args at dst). */
static int take_manifest(const char *cmd, const char *name, const char *value, void *dst)
{
    (void)cmd, (void)name;
    embed_args *a = dst;
    a->manifests[a->nmanifests++] = value;
    return 0;
}

static int take_dtype(const char *cmd, const char *name, const char *value, void *dst)
{
    (void)name;
    if (rv_embed_dtype_parse(value, dst) != RV_OK)
        return cli_usage_error(cmd, "--dtype wants f32, f16 or bf16, got '%s'", value);
    return 0;
}

/* An INPUT (ctx: the embed_args); "-" before "--" is refused. */
static int take_input(const char *cmd, const char *arg, int dashed, void *ctx)
{
    embed_args *a = ctx;
    if (!dashed && strcmp(arg, "-") == 0)
        return cli_usage_error(cmd, "standard input ('-') cannot be embedded: every rank "
                                  "opens the file itself; save it to a file first");
    a->inputs[a->ninputs++] = arg;
    return 0;
}

static int parse_args(int argc, char **argv, embed_args *a)
{
    memset(a, 0, sizeof *a);
    rv_embed_opts_default(&a->o);
    a->o.io.start_s = NAN; /* --start given or not */
    a->model = "tiny";
    a->backend = "local";
    a->cp = 1;
    a->gpu = -1;
    a->progress_s = 30;
    a->manifests = calloc((size_t)argc, sizeof *a->manifests);
    a->inputs = calloc((size_t)argc, sizeof *a->inputs);
    if (!a->manifests || !a->inputs) {
        cli_error("embed: out of memory");
        return RV_EXIT_FAIL;
    }
    int rc, audio_set = 0, video_set = 0, no_audio = 0, no_video = 0;
    rv_embed_opts *o = &a->o;
    const cli_flag flags[] = {
        /* inputs and outputs */
        {.name = "--output", .alias = "-o", .kind = RV_CLI_TEXT, .dst = &a->out},
        {.name = "--out-dir", .kind = RV_CLI_TEXT, .dst = &a->out_dir},
        {.name = "--log", .kind = RV_CLI_TEXT, .dst = &a->log},
        {.name = "--manifest", .kind = RV_CLI_CUSTOM, .dst = a, .take = take_manifest},
        {.name = "--resume", .kind = RV_CLI_SWITCH, .dst = &a->resume},
        {.name = "--tokens", .kind = RV_CLI_SWITCH, .dst = &o->tokens},
        {.name = "--dtype", .kind = RV_CLI_CUSTOM, .dst = &o->dtype, .take = take_dtype},
        {.name = "--normalize", .kind = RV_CLI_SWITCH, .dst = &o->normalize},
        {.name = "--shard", .kind = RV_CLI_CUSTOM, .dst = a, .take = take_shard},
        {.name = "--claim-stale", .kind = RV_CLI_DOUBLE, .dst = &a->claim_stale_s, .lo = 1,
         .hi = 1e7},
        /* the model */
        {.name = "--model", .kind = RV_CLI_TEXT, .dst = &a->model},
        RV_CLI_MODEL_FLAGS(&a->seed, &a->seed_set, &a->heads, &a->tubelet),
        {.name = "--audio", .kind = RV_CLI_SWITCH, .dst = &o->want_audio},
        {.name = "--video", .kind = RV_CLI_SWITCH, .dst = &o->want_video},
        /* parallelism */
        {.name = "--cp", .kind = RV_CLI_INT, .dst = &a->cp, .lo = 1, .hi = 1024,
         .seen = &a->cp_set},
        {.name = "--ranks", .kind = RV_CLI_INT, .dst = &a->ranks, .lo = 1, .hi = 1024},
        {.name = "--prefetch", .kind = RV_CLI_INT, .dst = &o->prefetch, .lo = 0,
         .hi = RV_EMBED_MAX_PREFETCH},
        {.name = "--backend", .kind = RV_CLI_CUSTOM, .dst = &a->backend, .take = cli_take_backend},
        {.name = "--device", .kind = RV_CLI_DEVICE, .dst = &o->device},
        {.name = "--precision", .kind = RV_CLI_PRECISION, .dst = &o->precision},
        {.name = "--gpu", .kind = RV_CLI_INT, .dst = &a->gpu, .lo = 0, .hi = 1023},
        {.name = "--strategy", .kind = RV_CLI_CUSTOM, .dst = &o->strategy,
         .take = cli_take_strategy},
        {.name = "--causal", .kind = RV_CLI_SWITCH, .dst = &o->causal},
        {.name = "--attention", .kind = RV_CLI_CUSTOM, .dst = &o->span, .take = cli_take_span},
        {.name = "--threads", .kind = RV_CLI_INT, .dst = &o->threads, .lo = 1,
         .hi = RV_CLI_MAX_THREADS},
        {.name = "--decode-threads", .kind = RV_CLI_INT, .dst = &o->io.threads, .lo = 1,
         .hi = RV_INGEST_MAX_THREADS},
        {.name = "--timeout", .kind = RV_CLI_DOUBLE, .dst = &o->timeout_s, .lo = 0.001,
         .hi = 1e7},
        /* sampling */
        RV_CLI_INGEST_FLAGS(&o->io, NULL, &audio_set, &video_set),
        {.name = "--segment", .kind = RV_CLI_DOUBLE, .dst = &o->segment_s, .lo = 0.001,
         .hi = 1e9},
        {.name = "--hop", .kind = RV_CLI_DOUBLE, .dst = &o->hop_s, .lo = 0.001, .hi = 1e9},
        {.name = "--no-audio", .kind = RV_CLI_SWITCH, .dst = &no_audio},
        {.name = "--no-video", .kind = RV_CLI_SWITCH, .dst = &no_video},
        {.name = "--max-tokens", .kind = RV_CLI_I64, .dst = &o->max_tokens, .lo = 1,
         .hi = INT64_MAX},
        /* reporting */
        {.name = "--quiet", .alias = "-q", .kind = RV_CLI_SWITCH, .dst = &a->quiet},
        {.name = "--json", .kind = RV_CLI_SWITCH, .dst = &a->json},
        {.name = "--progress", .kind = RV_CLI_DOUBLE, .dst = &a->progress_s, .lo = 0,
         .hi = 1e6},
    };
    rc = cli_flags_parse(CMD, argc, argv, flags, RV_CLI_NFLAGS(flags),
                         &(cli_operands){.what = "INPUT", .take = take_input, .ctx = a});
    if (rc)
        return rc;
    if (no_audio && audio_set)
        return cli_usage_error(CMD, "--no-audio and --audio-stream contradict each other");
    if (no_video && video_set)
        return cli_usage_error(CMD, "--no-video and --video-stream contradict each other");
    if (no_audio && no_video)
        return cli_usage_error(CMD, "--no-audio and --no-video leave nothing to embed");
    /* Choosing a stream insists on its modality, as --audio / --video do. */
    a->o.want_audio |= audio_set;
    a->o.want_video |= video_set;
    if ((no_audio && a->o.want_audio) || (no_video && a->o.want_video))
        return cli_usage_error(CMD, "--%s and --no-%s contradict each other",
                                  a->o.want_audio && no_audio ? "audio" : "video",
                                  a->o.want_audio && no_audio ? "audio" : "video");
    if (no_audio)
        a->o.io.audio_stream = -2;
    if (no_video)
        a->o.io.video_stream = -2;
    a->o.start_at = a->o.io.start_s;
    a->o.io.start_s = 0;
    /* The claims live beside the outputs, in a folder the jobs share. */
    if (a->shard_count && a->out)
        return cli_usage_error(CMD, "--shard divides the inputs of jobs sharing --out-dir; "
                                  "-o %s names one output: use --out-dir DIR",
                                  out_is_stdout(a->out) ? "-" : "OUT");
    if (a->shard_count && !a->out_dir)
        return cli_usage_error(CMD, "--shard needs --out-dir DIR, the folder the jobs share "
                                  "(outputs and claim files)");
    if (a->claim_stale_s > 0 && !a->shard_count)
        return cli_usage_error(CMD, "--claim-stale is about the claim files of --shard I/N");
    if (a->out && a->out_dir)
        return cli_usage_error(CMD, "-o names one output, --out-dir a folder of them: "
                                  "give one of them");
    if (out_is_stdout(a->out) && a->json)
        return cli_usage_error(CMD, "-o - and --json both want standard output: give one "
                                  "of them");
    if (out_is_stdout(a->out) && a->resume)
        return cli_usage_error(CMD, "--resume has no output to look at with -o -");
    /* mpiexec forwards each process's standard output (OpenMPI through a
     * terminal, which would mangle the bytes). */
    if (out_is_stdout(a->out) && strcmp(a->backend, "local") != 0)
        return cli_usage_error(CMD, "-o - needs --backend local (under mpiexec standard "
                                  "output is the launcher's): write a file");
    if (a->ninputs == 0 && a->nmanifests == 0)
        return cli_usage_error(CMD, "which recordings? give INPUT files or --manifest LIST");
    if ((rc = model_cli_check_backend(CMD, a->backend, strcmp(a->o.device, "cuda") == 0, a->gpu,
                                      &a->o.span)) != 0)
        return rc;
    if (strcmp(a->backend, "local") == 0) {
        if (a->ranks == 0)
            a->ranks = a->cp;
        if (a->ranks % a->cp)
            return cli_usage_error(CMD, "--ranks %d is not a multiple of --cp %d (the ranks "
                                      "form groups of --cp)", a->ranks, a->cp);
    } else if (a->ranks) {
        return cli_usage_error(CMD, "--ranks is the thread count of --backend local; under "
                                  "mpiexec the ranks are its processes (-n)");
    }
    return 0;
}

/* ---- setup ------------------------------------------------------------------------ */

/* mkdir -p dir. */
static int make_dirs(const char *dir)
{
    char path[4096];
    snprintf(path, sizeof path, "%s", dir);
    size_t n = strlen(path);
    for (size_t i = 1; i <= n; i++) {
        if (path[i] != '/' && path[i] != '\0')
            continue;
        char c = path[i];
        path[i] = '\0';
        if (mkdir(path, 0777) != 0 && errno != EEXIST) {
            cli_error("embed: cannot create the folder %s: %s", path, strerror(errno));
            return RV_EXIT_FAIL;
        }
        path[i] = c;
    }
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        cli_error("embed: %s is not a folder", dir);
        return RV_EXIT_FAIL;
    }
    return 0;
}

/* ---- main --------------------------------------------------------------------------- */

static int embed_main(int argc, char **argv)
{
    embed_args a;
    embed_settings set;
    embed_batch b;
    embed_input *in = NULL;
    model_cli mc;
    rv_vit_model *model = NULL;
    rv_comm *world = NULL;
    memset(&mc, 0, sizeof mc);
    int n = 0, cap = 0, rank = 0, rc;
    memset(&set, 0, sizeof set);
    memset(&b, 0, sizeof b);
    double t0 = rv_clock_s();
    if ((rc = parse_args(argc, argv, &a)) != 0)
        goto end;
    if (out_is_stdout(a.out) && (rc = out_stdout_take(CMD)) != 0)
        goto end;
    const int cuda = strcmp(a.o.device, "cuda") == 0;
    rv_status dst = rv_backend_check(a.o.device); /* before any work */
    if (dst != RV_OK) {
        rc = cli_fail(dst, CMD);
        goto end;
    }
    if ((rc = cli_check_precision(CMD, a.o.device, a.o.precision)) != 0)
        goto end;
    for (int i = 0; i < a.ninputs; i++)
        if ((rc = embed_inputs_add(a.inputs[i], &in, &n, &cap)) != 0)
            goto end;
    for (int i = 0; i < a.nmanifests; i++)
        if ((rc = embed_inputs_manifest(a.manifests[i], &in, &n, &cap)) != 0)
            goto end;
    if (n == 0) {
        rc = cli_usage_error(CMD, "the manifest lists no recordings");
        goto end;
    }
    if (a.out && n > 1) {
        rc = cli_usage_error(CMD, "-o names the output of one input; for %d inputs use "
                                "--out-dir DIR", n);
        goto end;
    }

    /* The ranks: nccl is an MPI job too (MPI bootstraps NCCL and carries the votes). */
    set.opts = a.o;
    set.opts.nccl = strcmp(a.backend, "nccl") == 0;
    set.mpi = set.opts.nccl || strcmp(a.backend, "mpi") == 0;
    set.ranks = a.cp;
    set.world = a.ranks;
    set.opts.gpu = a.gpu;
    if (set.mpi) {
        if (!rv_comm_backend_built("mpi")) {
            rv_fail(RV_ERR_UNSUPPORTED, "this build has no MPI (rebuild with MPI found, "
                    "-DRINGVIT_MPI=ON); --backend local runs --cp N ranks as threads");
            rc = cli_fail(RV_ERR_UNSUPPORTED, CMD);
            goto end;
        }
        rv_status st = rv_comm_mpi_world(&world);
        if (st != RV_OK) {
            rc = cli_fail(st, CMD);
            goto end;
        }
        rank = world->rank;
        if (a.cp_set && world->size % a.cp) {
            rc = rank == 0 ? cli_usage_error(CMD, "--cp %d does not divide the %d processes "
                                                "mpiexec started (the ranks form groups of --cp; "
                                                "leave --cp out for one group of all)", a.cp,
                                                world->size)
                           : RV_EXIT_USAGE;
            goto end;
        }
        set.world = world->size;
        set.ranks = a.cp_set ? a.cp : world->size;
        if (cuda && /* one GPU per process */
            (rc = model_cli_mpi_gpu(CMD, a.gpu, rank, world->size, a.quiet, set.opts.nccl,
                                    &set.opts.gpu)) != 0)
            goto end;
    } else if (cuda && a.gpu >= 0) {
        char why[160];
        if ((rc = model_cli_gpu(CMD, a.gpu, 0, &set.opts.gpu, why, sizeof why)) != 0)
            goto end;
    }
    /* --threads: in all for local ranks (the threads of this process share them), a
     * process's own under MPI. */
    set.opts.local_ranks = set.mpi ? 1 : set.world;
    const int loud = rank == 0;

    /* The model, and the options checked against it as the job will take them. */
    if ((rc = model_cli_open(CMD, a.model, a.seed, a.seed_set, a.heads, a.tubelet, loud, &mc)) != 0)
        goto end;
    model = mc.m;
    char why[256];
    int use_video = 0, use_audio = 0;
    if (rv_embed_check(model, &set.opts, set.ranks, set.mpi) != RV_OK ||
        rv_embed_modalities(&model->cfg, &set.opts, &use_video, &use_audio, why, sizeof why) !=
            RV_OK) {
        rc = loud ? cli_usage_error(CMD, "%s", rv_last_error()) : RV_EXIT_USAGE;
        goto end;
    }
    set.model = model;
    set.model_name = a.model;
    set.random_weights = mc.random;
    rv_vit_hash(model, set.model_hash);
    if (loud && !a.quiet) {
        model_cli_warn_random(CMD, &mc, a.model);
        if (why[0])
            cli_error("embed: %s", why);
    }
    set.resume = a.resume;
    set.quiet = a.quiet || !loud;
    set.json = a.json && loud;
    set.progress_s = a.progress_s;
    set.shard_index = a.shard_index;
    set.shard_count = a.shard_count;
    set.claim_stale_s = a.claim_stale_s > 0 ? a.claim_stale_s : EMBED_CLAIM_STALE_S;

    /* Outputs, stale temporary files and the log (rank 0). */
    const char *dir = a.out_dir ? a.out_dir : ".";
    if ((rc = embed_inputs_name(in, n, a.out, dir)) != 0)
        goto end;
    char log_path[4200];
    const char *log = a.log;
    if (!log && !a.out) {
        int k = snprintf(log_path, sizeof log_path, "%s/", dir);
        if (set.shard_count) /* one log per job: they never write one file */
            snprintf(log_path + k, sizeof log_path - (size_t)k, EMBED_SHARD_LOG_FMT,
                     set.shard_index, set.shard_count);
        else
            snprintf(log_path + k, sizeof log_path - (size_t)k, "%s", EMBED_LOG_NAME);
        log = log_path;
    }
    b.set = &set;
    b.in = in;
    b.n = n;
    b.groups_left = set.world / set.ranks;
    pthread_mutex_init(&b.lock, NULL);
    pthread_cond_init(&b.changed, NULL);
    if (!(b.res = calloc((size_t)n, sizeof *b.res))) {
        rc = loud ? (cli_error("embed: out of memory"), RV_EXIT_FAIL) : RV_EXIT_FAIL;
        goto end;
    }
    if (rank == 0) {
        char odir[4096];
        const char *slash = a.out ? strrchr(a.out, '/') : NULL;
        snprintf(odir, sizeof odir, "%.*s", a.out ? (slash ? (int)(slash - a.out) : 1) : (int)strlen(dir),
                 a.out ? (slash ? a.out : ".") : dir);
        if (odir[0] && (rc = make_dirs(odir)) != 0)
            goto end;
        /* Before any work: an output that is a device, FIFO, socket or folder
         * would stop the batch only after its input was embedded. */
        for (int i = 0; i < n && !out_is_stdout(a.out); i++) {
            char target[4096];
            rv_status ost = out_target_path(in[i].output, target, sizeof target);
            if (ost != RV_OK) {
                rc = cli_fail(ost, CMD);
                goto end;
            }
        }
        /* With --shard another machine's live process may be writing beside
         * an output: its temporary file goes only once its input is claimed. */
        if (!set.shard_count)
            embed_output_clean_stale(in, n);
        rv_status st = embed_report_open(&set, log, n, &b.report);
        if (st == RV_OK && set.shard_count)
            st = embed_shard_open(&set, in, n, dir, b.report, &b.shard);
        if (st != RV_OK) {
            rc = cli_fail(st, NULL);
            goto end;
        }
        for (int i = 0; i < n && !a.quiet; i++)
            if (in[i].note)
                embed_report_message(b.report, "embed: %s: %s", in[i].path, in[i].note);
    }

    cli_on_stop_signals(embed_on_signal);
    if (set.mpi) {
        embed_batch_rank(world, &b);
    } else {
        rv_status st = rv_local_run_copy(set.world, embed_batch_rank, &b, rv_backend_copy(set.opts.device));
        if (st != RV_OK && !b.fatal) {
            b.fatal = 1;
            snprintf(b.fatal_msg, sizeof b.fatal_msg, "%s", rv_last_error());
        }
    }
    const int left = embed_shard_left(b.shard);
    char log_error[320] = "", index_error[320] = "";
    if (embed_report_log_error(b.report))
        snprintf(log_error, sizeof log_error, "%s", embed_report_log_error(b.report));
    /* The index of --out-dir (not when nothing could run: the last one stays). */
    if (b.report && !a.out && (b.done > 0 || !b.fatal)) {
        char index_path[4200];
        snprintf(index_path, sizeof index_path, "%s/%s", dir, EMBED_INDEX_NAME);
        /* With --shard: every complete output, whichever job wrote it. */
        embed_shard_index_lock(b.shard, index_path);
        embed_shard_report_others(b.shard, b.report);
        if (embed_report_index(b.report, index_path) != RV_OK)
            snprintf(index_error, sizeof index_error, "%s", rv_last_error());
        embed_shard_index_unlock(b.shard);
    }
    embed_shard_close(&b.shard); /* claims of inputs not ended go back to the other jobs */
    embed_report_close(&b.report);

    const int ok = b.counts[EMBED_OK], bad = b.counts[EMBED_FAILED],
              skipped = b.counts[EMBED_SKIPPED];
    if (b.stopped) {
        rc = 128 + (embed_stop_signal ? (int)embed_stop_signal : SIGTERM);
        if (loud)
            cli_error("embed: stopped by a signal after %d of %d inputs (%d ok, %d failed, %d "
                         "skipped); rerun with --resume to finish", b.done, n, ok, bad, skipped);
    } else if (b.fatal) {
        rc = RV_EXIT_FAIL;
        if (loud)
            cli_error("embed: %s%s (%d of %d inputs done)",
                         b.done ? "the batch could not go on: " : "nothing could run: ",
                         b.fatal_msg[0] ? b.fatal_msg : "the ranks lost each other", b.done, n);
    } else {
        rc = bad ? RV_EXIT_SOME_FAILED : RV_EXIT_OK;
        /* The outputs are complete, but the record of them is not. */
        if (log_error[0]) {
            rc = rc == RV_EXIT_OK ? RV_EXIT_FAIL : rc;
            if (loud)
                cli_error("embed: %s (the outputs are written; the log is incomplete)",
                             log_error);
        }
        char others[64] = "";
        if (set.shard_count)
            snprintf(others, sizeof others, ", %d left to other shards", left);
        if (loud && !set.quiet && (n > 1 || set.shard_count))
            fprintf(stderr, RV_CLI_PROG ": embed: %d ok, %d failed, %d skipped%s of %d in %.1f s%s%s\n",
                    ok, bad, skipped, others, n, rv_clock_s() - t0, log ? "; log " : "", log ? log : "");
    }
    if (index_error[0]) {
        rc = rc == RV_EXIT_OK ? RV_EXIT_FAIL : rc;
        cli_error("embed: %s (the outputs are written; the index is not)", index_error);
    }
end:
    if (world) {
        /* A broken communicator cannot finalize cleanly: end the job. Rank 0 ends
         * it once it has said why; the others give it a moment to (it may be the
         * silent one). */
        if (b.fatal && set.ranks > 1) {
            if (rank != 0) {
                struct timespec pause = {EMBED_ABORT_PAUSE_S, 0};
                nanosleep(&pause, NULL);
                /* Still here: rank 0 could not say it. */
                cli_error("embed: the batch could not go on: %s",
                             b.fatal_msg[0] ? b.fatal_msg : "the ranks lost each other");
            }
            rv_comm_abort(world, rc);
        }
        rv_comm_free(&world);
        rv_comm_mpi_finalize();
    }
    if (b.set) {
        pthread_mutex_destroy(&b.lock);
        pthread_cond_destroy(&b.changed);
    }
    embed_shard_close(&b.shard);
    free(b.res);
    model_cli_close(&mc);
    embed_inputs_free(in, n);
    free(a.manifests);
    free(a.inputs);
    return rc;
}

const cli_command cmd_embed = {
    .name = "embed",
    .summary = "embed recordings with the encoder (embed INPUT... -o OUT | --out-dir DIR)",
    .main = embed_main,
    .help = help_text,
};
