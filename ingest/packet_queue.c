/* packet_queue.c: a growable ring of compressed video packets, the lookahead the
 * sparse path plans with (which packets a sample needs, where the next usable
 * keyframe is). Holds at most about one GOP, bounded by the reader. */
#include <stdlib.h>

#include "ingest_internal.h"

rv_status rv_pktq_push(rv_pktq *q, AVPacket *pkt)
{
    if (q->count == q->cap) {
        int cap = q->cap ? q->cap * 2 : 64;
        AVPacket **p = malloc(sizeof *p * (size_t)cap);
        if (!p)
            return rv_fail(RV_ERR_NOMEM, "packet queue: out of memory");
        for (int i = 0; i < q->count; i++)
            p[i] = q->pkts[(q->head + i) % q->cap];
        free(q->pkts);
        q->pkts = p;
        q->cap = cap;
        q->head = 0;
    }
    AVPacket *own = av_packet_alloc();
    if (!own)
        return rv_fail(RV_ERR_NOMEM, "packet queue: out of memory");
    av_packet_move_ref(own, pkt);
    q->pkts[(q->head + q->count) % q->cap] = own;
    q->count++;
    q->bytes += (size_t)own->size;
    return RV_OK;
}

AVPacket *rv_pktq_at(const rv_pktq *q, int i)
{
    if (i < 0 || i >= q->count)
        return NULL;
    return q->pkts[(q->head + i) % q->cap];
}

AVPacket *rv_pktq_pop(rv_pktq *q)
{
    if (q->count == 0)
        return NULL;
    AVPacket *p = q->pkts[q->head];
    q->head = (q->head + 1) % q->cap;
    q->count--;
    q->bytes -= (size_t)p->size;
    return p;
}

void rv_pktq_drop_front(rv_pktq *q, int n)
{
    for (int i = 0; i < n && q->count > 0; i++) {
        AVPacket *p = rv_pktq_pop(q);
        av_packet_free(&p);
    }
}

void rv_pktq_clear(rv_pktq *q)
{
    rv_pktq_drop_front(q, q->count);
}

void rv_pktq_release(rv_pktq *q)
{
    rv_pktq_clear(q);
    free(q->pkts);
    q->pkts = NULL;
    q->cap = q->head = q->count = 0;
    q->bytes = 0;
}
