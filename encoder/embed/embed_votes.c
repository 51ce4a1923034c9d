/* embed_votes.c: what every stage of a job asks of it: whether to stop (the
 * caller's hook), the group's votes between stages (rv_comm_vote.h) with the
 * stop request in them, beats for a rank that waits on its own, and the host
 * backend that embeds patches. Apart from the stages, which all use it. */
#include "embed_internal.h"

int embed_stopping(const rv_embed_job *j)
{
    return j->h.stop && j->h.stop(j->h.user);
}

rv_vote_outcome embed_agree(rv_embed_job *j, rv_status mine, const void *payload, size_t bytes)
{
    return rv_comm_vote(j->watch, mine, embed_stopping(j), payload, bytes, &j->vote);
}

rv_vote_outcome rv_embed_vote(rv_embed_job *j, rv_status mine, const void *payload, size_t bytes,
                              rv_vote *out)
{
    return rv_comm_vote(j->watch, mine, embed_stopping(j), payload, bytes, out);
}

void rv_embed_beat(rv_embed_job *j)
{
    if (j)
        rv_comm_watch_beat(j->watch);
}

rv_backend *embed_host_backend(const rv_embed_job *j)
{
    return j->host ? j->host : j->be;
}
