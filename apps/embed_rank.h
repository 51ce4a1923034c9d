/* embed_rank.h: one rank of `ringvit embed` (embed_batch.c) and the votes by
 * which all ranks agree after every stage that can fail, so one rank's failure
 * (a corrupt stretch of the file, no memory) fails the input on every rank at
 * the same point instead of leaving the others waiting. */
#ifndef RV_EMBED_RANK_H
#define RV_EMBED_RANK_H

#include <stdint.h>

#include "embed.h"
#include "rv_backend.h"
#include "rv_comm.h"
#include "rv_comm_watch.h"

#define EMBED_VOTE_VALS 10

/* What each rank says after a stage; 512 bytes, gathered by every rank. */
typedef struct embed_vote {
    int32_t status;                /* rv_status of this rank's stage */
    int32_t stop;                  /* 1: a signal asked this process to stop */
    double val[EMBED_VOTE_VALS];   /* stage results (rank 0's decisions, stats) */
    char msg[424];                 /* rv_last_error() when status != RV_OK */
} embed_vote;

typedef struct embed_rank {
    embed_batch *b;
    const embed_settings *set;
    rv_comm *comm;      /* the cp group, --timeout deadlines (the forward, pooling) */
    rv_comm *dev;       /* the same ranks for the forward's device buffers when comm
                         * cannot take them: NCCL (--backend nccl) or a staged copy
                         * of comm (--backend mpi --device cuda); NULL: comm */
    rv_comm *ctl;       /* the same ranks for the gather of --tokens (waits under watch) */
    rv_comm_watch *watch; /* the votes and the gather wait on live peers: a rank silent
                         * for --timeout fails them (rv_comm_watch.h) */
    rv_backend *be;     /* this rank's compute threads, or its GPU stream */
    rv_vit_model *dev_weights; /* the model in be's memory (--device cuda), else NULL */
    int rank, size;
    embed_vote *votes;  /* (size) the last vote */
} embed_rank;

/* Outcome of a vote and of one input. */
enum {
    AGREE_OK = 0,       /* every rank succeeded */
    AGREE_FAILED = 1,   /* some rank failed: the input fails (message in rv_last_error) */
    AGREE_STOP = 2,     /* a signal: the batch stops */
    AGREE_FATAL = 3,    /* communication broke: the batch cannot go on */
};

/* Every rank calls it together with its stage status (its rv_last_error() is
 * sent along) and up to EMBED_VOTE_VALS values; k->votes then holds every
 * rank's vote. On AGREE_FAILED rv_last_error() is the first failing rank's
 * message ("rank R: ..." when there are several ranks). */
int embed_agree(embed_rank *k, rv_status mine, const double *val, int nval);

/* One input on one rank (embed_job.c); every rank calls it together. res is
 * filled on rank 0 (other ranks pass scratch). Returns an AGREE_* outcome;
 * AGREE_OK covers a skipped input too (res->status). */
int embed_job_run(embed_rank *k, int index, embed_result *res);

#endif
