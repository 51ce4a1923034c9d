/* backend_device.c: a backend by device name (rv_backend_create), the check the
 * commands make before any work, and the copy local ranks on a GPU move their
 * messages with. One place for the messages that say why a device cannot run. */
#include <stdlib.h>
#include <string.h>

#include "rv_backend.h"
#include "rv_cuda.h"

static rv_status check_name(const char *device)
{
    if (device && (strcmp(device, "cpu") == 0 || strcmp(device, "cuda") == 0))
        return RV_OK;
    return rv_fail(RV_ERR_INVALID, "device '%s': known devices are cpu and cuda",
                   device ? device : "(null)");
}

rv_status rv_backend_create(const char *device, int threads, int gpu, rv_backend **out)
{
    *out = NULL;
    rv_status st = check_name(device);
    if (st != RV_OK)
        return st;
    if (strcmp(device, "cpu") == 0)
        return rv_backend_cpu_create(threads, out);
#ifdef RINGVIT_HAVE_CUDA
    int n = rv_cuda_device_count();
    if (n == 0)
        return rv_fail(RV_ERR_UNSUPPORTED, "device cuda: no CUDA device is visible "
                       "(check nvidia-smi and CUDA_VISIBLE_DEVICES)");
    return rv_backend_cuda_create(gpu < 0 ? -1 : gpu % n, out);
#else
    (void)gpu;
    return rv_fail(RV_ERR_UNSUPPORTED, "device cuda: this ringvit was built without CUDA "
                   "(configure with -DRINGVIT_CUDA=ON where nvcc is installed)");
#endif
}

rv_status rv_backend_check(const char *device)
{
    rv_status st = check_name(device);
    if (st != RV_OK || strcmp(device, "cpu") == 0)
        return st;
    rv_backend *probe = NULL;
    st = rv_backend_create(device, 1, 0, &probe);
    rv_backend_free(&probe);
    return st;
}

rv_backend_copy_fn rv_backend_copy(const char *device)
{
#ifdef RINGVIT_HAVE_CUDA
    return device && strcmp(device, "cuda") == 0 ? rv_cuda_copy_sync : NULL;
#else
    (void)device;
    return NULL;
#endif
}

int rv_cpu_threads_per_rank(int threads, int local_ranks, int mpi)
{
    const int cores = rv_cpu_default_threads();
    if (!mpi) {
        int t = (threads > 0 ? threads : cores) / (local_ranks > 0 ? local_ranks : 1);
        return t > 0 ? t : 1;
    }
    if (threads > 0)
        return threads;
    const char *env = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    if (!env)
        env = getenv("MPI_LOCALNRANKS");
    int local = env ? atoi(env) : 1;
    int t = cores / (local > 0 ? local : 1);
    return t > 0 ? t : 1;
}
