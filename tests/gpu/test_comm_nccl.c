/* test_comm_nccl.c: the "nccl" communicator, one rank per GPU as threads of this
 * process, bootstrapped over the local backend (rank 0's ncclUniqueId travels
 * through rv_comm_allgather). Device buffers are filled from the host patterns of
 * tests/ref/ref_comm.h and checked on the host after: ring shift (isend/irecv
 * launched as one group at the wait), allreduce f32 and f64, allgather, alltoall,
 * barrier, split. With two or more GPUs, a receive nobody sends must fail with
 * RV_ERR_TIMEOUT within the deadline. Exits 77 (skipped) where there is no GPU
 * (gpu_test_main.h). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref_comm.h"
#include "rv_comm.h"
#include "rv_cuda.h"

#ifdef RINGVIT_HAVE_NCCL
#include <cuda_runtime.h>

#define N_BYTES ((size_t)3 << 20)

static int ranks(void)
{
    int n = rv_cuda_device_count();
    return n > 8 ? 8 : n;
}

/* Copies host bytes to a fresh device buffer, or allocates a zeroed one. */
static void *dev(const void *host, size_t n)
{
    void *d = NULL;
    if (cudaMalloc(&d, n ? n : 1) != cudaSuccess)
        return NULL;
    if (host)
        cudaMemcpy(d, host, n, cudaMemcpyHostToDevice);
    else
        cudaMemset(d, 0, n ? n : 1);
    return d;
}

static rv_status checks_fn(rv_comm *boot, void *arg)
{
    (void)arg;
    const int n = boot->size, r = boot->rank, left = (r - 1 + n) % n, right = (r + 1) % n;
    rv_comm *c = NULL, *sub = NULL;
    char *h = malloc(N_BYTES * n), *hin = malloc(N_BYTES * n);
    void *ds = NULL, *dr = NULL;
    rv_comm_request *req[2] = {NULL, NULL};
    rv_status st = rv_comm_nccl_create(boot, r, &c);
    if (st != RV_OK)
        goto end;
    rv_comm_set_timeout(c, 30);
    /* Ring shift. */
    ref_comm_fill(h, N_BYTES, 1000 + r);
    ds = dev(h, N_BYTES), dr = dev(NULL, N_BYTES * n);
    if (!ds || !dr) {
        st = rv_fail(RV_ERR_NOMEM, "rank %d: cudaMalloc", r);
        goto end;
    }
    if ((st = rv_comm_irecv(c, dr, N_BYTES, left, 0, &req[0])) != RV_OK ||
        (st = rv_comm_isend(c, ds, N_BYTES, right, 0, &req[1])) != RV_OK ||
        (st = rv_comm_waitall(req, 2)) != RV_OK)
        goto end;
    cudaMemcpy(hin, dr, N_BYTES, cudaMemcpyDeviceToHost);
    if (ref_comm_first_wrong(hin, N_BYTES, 1000 + left) != N_BYTES) {
        st = rv_fail(RV_ERR_INTERNAL, "rank %d: ring: wrong bytes from rank %d", r, left);
        goto end;
    }
    /* Allreduce of integers (exact), f32 then f64. */
    for (int k = 0; k < 2 && st == RV_OK; k++) {
        rv_comm_dtype dt = k ? RV_COMM_F64 : RV_COMM_F32;
        size_t count = N_BYTES / 8;
        for (size_t i = 0; i < count; i++) {
            double v = (double)((i * 7 + (size_t)r * 13) % 1001);
            if (dt == RV_COMM_F32)
                ((float *)h)[i] = (float)v;
            else
                ((double *)h)[i] = v;
        }
        cudaMemcpy(ds, h, count * rv_comm_dtype_size(dt), cudaMemcpyHostToDevice);
        if ((st = rv_comm_allreduce(c, ds, dr, count, dt)) != RV_OK)
            goto end;
        cudaMemcpy(hin, dr, count * rv_comm_dtype_size(dt), cudaMemcpyDeviceToHost);
        for (size_t i = 0; i < count; i++) {
            double want = 0;
            for (int q = 0; q < n; q++)
                want += (double)((i * 7 + (size_t)q * 13) % 1001);
            double got = dt == RV_COMM_F32 ? ((float *)hin)[i] : ((double *)hin)[i];
            if (got != want) {
                st = rv_fail(RV_ERR_INTERNAL, "rank %d: allreduce %s: element %zu is %g, want %g",
                             r, rv_comm_dtype_name(dt), i, got, want);
                goto end;
            }
        }
    }
    /* Allgather, then alltoall. */
    ref_comm_fill(h, N_BYTES, 2000 + r);
    cudaMemcpy(ds, h, N_BYTES, cudaMemcpyHostToDevice);
    if ((st = rv_comm_allgather(c, ds, dr, N_BYTES)) != RV_OK)
        goto end;
    cudaMemcpy(hin, dr, N_BYTES * n, cudaMemcpyDeviceToHost);
    for (int q = 0; q < n; q++)
        if (ref_comm_first_wrong(hin + (size_t)q * N_BYTES, N_BYTES, 2000 + q) != N_BYTES) {
            st = rv_fail(RV_ERR_INTERNAL, "rank %d: allgather: block %d is wrong", r, q);
            goto end;
        }
    size_t blk = N_BYTES / n;
    for (int j = 0; j < n; j++)
        ref_comm_fill(h + (size_t)j * blk, blk, 3000 + 64 * r + j);
    cudaMemcpy(ds, h, blk * n, cudaMemcpyHostToDevice);
    if ((st = rv_comm_alltoall(c, ds, dr, blk)) != RV_OK)
        goto end;
    cudaMemcpy(hin, dr, blk * n, cudaMemcpyDeviceToHost);
    for (int q = 0; q < n; q++)
        if (ref_comm_first_wrong(hin + (size_t)q * blk, blk, 3000 + 64 * q + r) != blk) {
            st = rv_fail(RV_ERR_INTERNAL, "rank %d: alltoall: block from %d is wrong", r, q);
            goto end;
        }
    /* Barrier and split by parity. */
    if ((st = rv_comm_barrier(c)) != RV_OK || (st = rv_comm_split(c, r % 2, r, &sub)) != RV_OK)
        goto end;
    if (!sub || sub->rank != r / 2 || sub->size != (n - r % 2 + 1) / 2) {
        st = rv_fail(RV_ERR_INTERNAL, "rank %d: split: rank %d of %d", r, sub ? sub->rank : -1,
                     sub ? sub->size : -1);
        goto end;
    }
    st = rv_comm_barrier(sub);
end:
    rv_comm_request_free(&req[0]);
    rv_comm_request_free(&req[1]);
    rv_comm_free(&sub);
    rv_comm_free(&c);
    cudaFree(ds);
    cudaFree(dr);
    free(h);
    free(hin);
    return st;
}

Test(comm_nccl, operations_on_every_gpu, .timeout = 300)
{
    rv_status st = rv_local_run(ranks(), checks_fn, NULL);
    cr_assert_eq(st, RV_OK, "%s", rv_last_error());
}

typedef struct timeout_arg {
    rv_status st;
    char msg[512];
    double elapsed;
} timeout_arg;

/* Rank 0 waits for a message rank 1 never sends; rank 1 stays until rank 0 is done. */
static rv_status timeout_fn(rv_comm *boot, void *p)
{
    timeout_arg *a = p;
    rv_comm *c = NULL;
    void *d = NULL;
    rv_comm_set_timeout(boot, 60);
    rv_status st = rv_comm_nccl_create(boot, boot->rank, &c);
    if (st != RV_OK)
        return st;
    rv_comm_set_timeout(c, 1.0);
    if (boot->rank == 0 && (d = dev(NULL, 4096)) != NULL) {
        rv_comm_request *req = NULL;
        double t0 = rv_clock_s();
        rv_status w = rv_comm_irecv(c, d, 4096, 1, 0, &req);
        if (w == RV_OK)
            w = rv_comm_wait(&req);
        a->elapsed = rv_clock_s() - t0;
        a->st = w;
        snprintf(a->msg, sizeof a->msg, "%s", rv_last_error());
    }
    st = boot->rank < 2 ? rv_comm_barrier(boot) : RV_OK; /* over the host bootstrap */
    rv_comm_free(&c);
    cudaFree(d);
    return st;
}

Test(comm_nccl, silent_peer_times_out, .timeout = 120)
{
    if (ranks() < 2)
        cr_skip_test("needs 2 GPUs");
    timeout_arg a = {0};
    rv_status st = rv_local_run(2, timeout_fn, &a);
    cr_assert_eq(st, RV_OK, "%s", rv_last_error());
    cr_assert_eq(a.st, RV_ERR_TIMEOUT, "status %d: %s", a.st, a.msg);
    cr_assert(strstr(a.msg, "rank 0: irecv from rank 1"), "%s", a.msg);
    cr_assert(a.elapsed >= 1.0 && a.elapsed < 5.0, "failed after %.2f s", a.elapsed);
}

#elif defined(RINGVIT_HAVE_CUDA)

/* A CUDA build is meant to carry the NCCL communicator: on a GPU machine its
 * absence fails here rather than passing with nothing run. */
Test(comm_nccl, built_with_nccl)
{
    cr_fail("this CUDA build has no NCCL communicator (NCCL was not found at configure time)");
}

#endif

#include "gpu_test_main.h"
