/* model_cli.h: --model for the subcommands that run the encoder (embed,
 * finetune, bench encoder, inspect): a preset name (random weights, seeded), a
 * weights file (ringvit's own or torchvision-named .safetensors) or a model
 * folder in the Hugging Face layout; the load options (--seed, --heads,
 * --tubelet, as flag-table entries); the warning that random weights mean
 * nothing; and which modalities a run embeds (the model's own, narrowed by
 * --no-audio / --no-video; --audio / --video insist on one and are refused when
 * the weights lack it). */
#ifndef RV_MODEL_CLI_H
#define RV_MODEL_CLI_H

#include <stdint.h>

#include "cli_flags.h"
#include "rv_tokens.h"
#include "rv_vit.h"

typedef struct model_cli {
    rv_vit_model *m;
    int random;             /* 1: a preset's seeded random weights */
    rv_vit_load_info info;  /* what the load found (zero for a preset) */
} model_cli;

/* Opens --model spec (heads, tubelet > 0 override; seed_set: --seed was given,
 * which only a preset takes). Returns 0, RV_EXIT_USAGE (a name that is no
 * preset, file or folder; --seed with a file) or RV_EXIT_FAIL (the load failed),
 * after a message when loud. */
int model_cli_open(const char *cmd, const char *spec, int64_t seed, int seed_set, int heads,
                   int tubelet, int loud, model_cli *out);
void model_cli_close(model_cli *mc);

/* model_cli_open's options as flag-table entries (cli_flags.h): --seed N (0 to
 * INT64_MAX; *seed_seen = 1 when given, NULL: not kept), --heads H (1 to 65536),
 * --tubelet T (1 to 64). */
#define RV_CLI_MODEL_FLAGS(seed_dst, seed_seen, heads_dst, tubelet_dst)                     \
    {.name = "--seed", .kind = RV_CLI_I64, .dst = (seed_dst), .lo = 0, .hi = INT64_MAX,      \
     .seen = (seed_seen)},                                                                 \
    {.name = "--heads", .kind = RV_CLI_INT, .dst = (heads_dst), .lo = 1, .hi = 65536},       \
    {.name = "--tubelet", .kind = RV_CLI_INT, .dst = (tubelet_dst), .lo = 1, .hi = 64}

/* One warning line for a preset's random weights, naming the flag for real ones
 * (nothing when quiet). */
void model_cli_warn_random(const char *cmd, const model_cli *mc, const char *spec);

/* The modalities a run uses: the model's (cfg video / audio), minus --no-video /
 * --no-audio; --video / --audio (want_video / want_audio) on a model without
 * weights for it are a usage error. *video / *audio get the result, why (cap
 * bytes) a one-line reason when a modality of the recording is left out because
 * of the model ("" when none). Returns 0 or RV_EXIT_USAGE after a message
 * (when loud). */
int model_cli_modalities(const char *cmd, const rv_vit_config *c, int want_video, int want_audio,
                         int no_video, int no_audio, int loud, int *video, int *audio, char *why,
                         size_t cap);

/* "folder", "file" or "preset" for the --model spec (without opening it). */
const char *model_cli_kind(const char *spec);

/* ---- ranks on GPUs (embed, finetune with --device cuda) --------------------------- */

/* The checks of --backend and --gpu (after parsing, before any work): nccl needs
 * a build with NCCL, --device cuda, and the full attention span (a span's plan
 * moves host memory over the forward's communicator, which NCCL cannot);
 * --gpu N needs --device cuda. Returns 0 or RV_EXIT_USAGE after a message. */
int model_cli_check_backend(const char *cmd, const char *backend, int cuda, int gpu_flag,
                            const rv_span *span);

/* The GPU of this process's rank under MPI (one rank per process): --gpu
 * (gpu_flag >= 0), else the local rank the launcher exports
 * (OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, SLURM_LOCALID) modulo the
 * GPUs this process sees, else rank modulo them; why (cap bytes) says which, for
 * the log line. Returns 0, or RV_EXIT_USAGE after a message when --gpu names a
 * GPU that is not there. */
int model_cli_gpu(const char *cmd, int gpu_flag, int rank, int *gpu, char *why, size_t cap);

/* model_cli_gpu for a process of an MPI run, then (unless quiet) its line below. */
int model_cli_mpi_gpu(const char *cmd, int gpu_flag, int rank, int size, int quiet, int nccl,
                      int *gpu);

/* One line on standard error for a rank under MPI with --device cuda: its host,
 * its GPU and how it was chosen, and how the activations move (NCCL, or staged
 * through host memory over MPI). */
void model_cli_gpu_line(const char *cmd, int rank, int size, int gpu, const char *why, int nccl);

#endif
