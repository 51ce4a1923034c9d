/* model_cli.c: --model, its load options, the random-weights warning, the
 * modality rule, and the placement of MPI ranks on GPUs (--backend, --gpu)
 * shared by the encoder's subcommands (model_cli.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "model_cli.h"
#include "rv_embed.h"
#include "rv_flat.h"
#include "rv_comm.h"
#ifdef RINGVIT_HAVE_CUDA
#include "rv_cuda.h"
#endif

const char *model_cli_kind(const char *spec)
{
    return rv_vit_spec_kind(spec);
}

int model_cli_open(const char *cmd, const char *spec, int64_t seed, int seed_set, int heads,
                   int tubelet, int loud, model_cli *out)
{
    rv_status st;
    char what[96];
    memset(out, 0, sizeof *out);
    snprintf(what, sizeof what, "%s: model", cmd);
    if (strcmp(model_cli_kind(spec), "preset") == 0) {
        rv_vit_config cfg;
        if (rv_vit_preset(spec, &cfg) != RV_OK)
            return loud ? cli_usage_error(cmd, "--model wants a preset (tiny, small, base), a "
                                             "weights file or a model folder, got '%s'", spec)
                        : RV_EXIT_USAGE;
        if (heads > 0) {
            if (cfg.dim % heads)
                return loud ? cli_usage_error(cmd, "--heads %d does not divide the %s "
                                                 "preset's width %d", heads, spec, cfg.dim)
                            : RV_EXIT_USAGE;
            cfg.heads = heads;
        }
        if (tubelet > 0)
            cfg.tubelet = tubelet;
        if ((st = rv_vit_new(&cfg, &out->m)) != RV_OK ||
            (st = rv_vit_init_random(out->m, (uint64_t)seed)) != RV_OK) {
            model_cli_close(out);
            return loud ? cli_fail(st, what) : RV_EXIT_FAIL;
        }
        out->random = 1;
        return 0;
    }
    if (seed_set)
        return loud ? cli_usage_error(cmd, "--seed seeds a preset's random weights; '%s' is a "
                                         "weights %s", spec, model_cli_kind(spec))
                    : RV_EXIT_USAGE;
    rv_vit_load_opts lo = {.heads = heads, .tubelet = tubelet};
    if ((st = rv_vit_load_ex(spec, &lo, &out->m, &out->info)) != RV_OK) {
        model_cli_close(out);
        return loud ? cli_fail(st, what) : RV_EXIT_FAIL;
    }
    return 0;
}

void model_cli_close(model_cli *mc)
{
    rv_vit_free(&mc->m);
    rv_vit_load_info_free(&mc->info);
}

void model_cli_warn_random(const char *cmd, const model_cli *mc, const char *spec)
{
    if (!mc->random)
        return;
    cli_error("warning: %s: --model %s has RANDOM weights (a preset): its embeddings show the "
                 "pipeline works and mean nothing; give --model a checkpoint folder (e.g. "
                 "MCG-NJU/videomae-base saved from the hub) or a weights file for real ones",
                 cmd, spec);
}

int model_cli_modalities(const char *cmd, const rv_vit_config *c, int want_video, int want_audio,
                         int no_video, int no_audio, int loud, int *video, int *audio, char *why,
                         size_t cap)
{
    /* The library's rule (rv_embed_modalities), which embed and Python apply too. */
    rv_embed_opts o;
    rv_embed_opts_default(&o);
    o.want_video = want_video;
    o.want_audio = want_audio;
    o.io.video_stream = no_video ? -2 : -1;
    o.io.audio_stream = no_audio ? -2 : -1;
    if (rv_embed_modalities(c, &o, video, audio, why, cap) != RV_OK)
        return loud ? cli_usage_error(cmd, "%s", rv_last_error()) : RV_EXIT_USAGE;
    return 0;
}

/* ---- ranks on GPUs -------------------------------------------------------------------- */

int model_cli_check_backend(const char *cmd, const char *backend, int cuda, int gpu_flag,
                            const rv_span *span)
{
    if (gpu_flag >= 0 && !cuda)
        return cli_usage_error(cmd, "--gpu %d: the ranks run on the CPU; add --device cuda",
                                  gpu_flag);
    if (strcmp(backend, "mpi") == 0 && !rv_comm_backend_built("mpi"))
        return cli_usage_error(cmd, "--backend mpi: this build has no MPI (configure with MPI "
                                  "found, -DRINGVIT_MPI=ON); --backend local runs the ranks as "
                                  "threads");
    if (strcmp(backend, "nccl") != 0)
        return 0;
    if (!rv_comm_backend_built("nccl"))
        return cli_usage_error(cmd, "--backend nccl: this build has no NCCL (configure with "
                                  "CUDA and NCCL found: -DRINGVIT_CUDA=ON, NCCL beside CUDA or "
                                  "under NCCL_HOME); --backend mpi --device cuda moves device "
                                  "memory through host memory instead");
    if (!cuda)
        return cli_usage_error(cmd, "--backend nccl moves GPU memory: add --device cuda "
                                  "(CPU ranks under mpiexec use --backend mpi)");
    if (span && span->kind != RV_SPAN_FULL)
        return cli_usage_error(cmd, "--backend nccl with --attention other than full: the "
                                  "span's exchange plan moves host memory, which NCCL cannot; "
                                  "use --backend mpi --device cuda");
    return 0;
}

/* The local rank an MPI launcher exports, or -1. */
static int launcher_local_rank(const char **name)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                                       "SLURM_LOCALID"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        char *end = NULL;
        if (!v || !v[0])
            continue;
        errno = 0;
        long r = strtol(v, &end, 10);
        if (errno || *end || r < 0 || r > 1 << 20)
            continue;
        *name = vars[i];
        return (int)r;
    }
    return -1;
}

int model_cli_gpu(const char *cmd, int gpu_flag, int rank, int *gpu, char *why, size_t cap)
{
#ifdef RINGVIT_HAVE_CUDA
    const int n = rv_cuda_device_count();
#else
    const int n = 0;
#endif
    const char *var = NULL;
    *gpu = 0;
    if (gpu_flag >= 0) {
        if (gpu_flag >= n)
            return cli_usage_error(cmd, "--gpu %d: this process sees %d GPU%s (0..%d)",
                                      gpu_flag, n, n == 1 ? "" : "s", n - 1);
        *gpu = gpu_flag;
        snprintf(why, cap, "--gpu");
        return 0;
    }
    if (n < 1) { /* the device check has refused this run already */
        snprintf(why, cap, "no GPU");
        return 0;
    }
    const int local = launcher_local_rank(&var), m = n > 0 ? n : 1; /* n is 0 without CUDA */
    if (local >= 0) {
        *gpu = local % m;
        snprintf(why, cap, "local rank %d (%s) %% %d GPU%s", local, var, n, n == 1 ? "" : "s");
    } else {
        *gpu = rank % m;
        snprintf(why, cap, "rank %d %% %d GPU%s: no local rank from the launcher", rank, n,
                 n == 1 ? "" : "s");
    }
    return 0;
}

int model_cli_mpi_gpu(const char *cmd, int gpu_flag, int rank, int size, int quiet, int nccl,
                      int *gpu)
{
    char why[160];
    int rc = model_cli_gpu(cmd, gpu_flag, rank, gpu, why, sizeof why);
    if (rc == 0 && !quiet)
        model_cli_gpu_line(cmd, rank, size, *gpu, why, nccl);
    return rc;
}

void model_cli_gpu_line(const char *cmd, int rank, int size, int gpu, const char *why, int nccl)
{
    char host[256] = "?";
    if (gethostname(host, sizeof host) != 0)
        snprintf(host, sizeof host, "?");
    host[sizeof host - 1] = '\0';
    fprintf(stderr, RV_CLI_PROG ": %s: rank %d of %d on %s: GPU %d (%s); activations %s\n", cmd,
            rank, size, host, gpu, why,
            nccl ? "over NCCL" : "staged through host memory over MPI");
}
