// NVSHMEM's own numbers for the rows of symmem's engine bench (host/benches/engine.rs),
// measured the same way: rank 0 against rank 1, host wall clock around a launch and a
// stream synchronisation, median of 9 samples after one warm-up.
//
// - put: one block of 256 threads puts n bytes to rank 1 (nvshmemx_putmem_nbi_block),
//   then every thread quiets (nvshmem_quiet), `repeats` times in one launch; per put.
// - latency_8b: one thread, an 8-byte nvshmem_putmem_nbi and nvshmem_quiet, 200 times.
// - all_reduce: nvshmemx_float_sum_reduce_on_stream over NVSHMEM_TEAM_WORLD (every rank;
//   the slowest rank's time).
//
// Initialised from a unique id that MPI broadcasts, as symmem's transport does over its
// bootstrap. Build (the device image; NV = NVSHMEM's folder):
//   nvcc -O2 -rdc=true -arch=sm_90 -I$NV/include nvshmem_bench.cu -o nvshmem-bench \
//     $(mpicc --showme:compile) -L$NV/lib -lnvshmem_host -lnvshmem_device \
//     $(mpicc --showme:link) -lcuda
// Run: mpirun -np 2 ./nvshmem-bench (2 PEs on one GPU need MPS).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mpi.h>
#include <nvshmem.h>
#include <nvshmemx.h>
#include <vector>

#define CHECK(x)                                                              \
    do {                                                                      \
        cudaError_t e = (x);                                                  \
        if (e != cudaSuccess) {                                               \
            fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e));           \
            exit(1);                                                          \
        }                                                                     \
    } while (0)

static const size_t MIB = 1 << 20;
static const int SAMPLES = 9;

__global__ void put_block(char *dst, const char *src, size_t n, int peer, int repeats) {
    for (int r = 0; r < repeats; r++) {
        nvshmemx_putmem_nbi_block(dst, src, n, peer);
        nvshmem_quiet();
        __syncthreads();
    }
}

__global__ void put_8b(char *dst, const char *src, int peer, int repeats) {
    for (int r = 0; r < repeats; r++) {
        nvshmem_putmem_nbi(dst, src, 8, peer);
        nvshmem_quiet();
    }
}

template <typename F> static double median_seconds(F f) {
    f();
    std::vector<double> t;
    for (int i = 0; i < SAMPLES; i++) {
        auto s = std::chrono::steady_clock::now();
        f();
        t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - s).count());
    }
    std::sort(t.begin(), t.end());
    return t[SAMPLES / 2];
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size, devices;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(cudaGetDeviceCount(&devices));
    CHECK(cudaSetDevice(rank % devices));
    nvshmemx_uniqueid_t id = NVSHMEMX_UNIQUEID_INITIALIZER;
    if (rank == 0) nvshmemx_get_uniqueid(&id);
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    nvshmemx_init_attr_t attr = NVSHMEMX_INIT_ATTR_INITIALIZER;
    nvshmemx_set_attr_uniqueid_args(rank, size, &id, &attr);
    nvshmemx_init_attr(NVSHMEMX_INIT_WITH_UNIQUEID, &attr);
    int major, minor, patch;
    nvshmemx_vendor_get_version_info(&major, &minor, &patch);
    char *dst = (char *)nvshmem_malloc(64 * MIB);
    char *src = (char *)nvshmem_malloc(64 * MIB);
    CHECK(cudaMemset(src, 7, 64 * MIB));
    cudaStream_t stream;
    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CHECK(cudaDeviceSynchronize());
    nvshmem_barrier_all();
    if (rank == 0)
        printf("nvshmem bench: %d PEs, NVSHMEM %d.%d.%d, rank 0 -> rank 1\n", size, major, minor,
               patch);
    const size_t puts[] = {256, 1 << 10, 4 << 10, 16 << 10, 64 << 10, MIB, 64 * MIB};
    if (rank == 0) {
        for (size_t n : puts) {
            int repeats = (int)std::min<size_t>(std::max<size_t>(64 * MIB / n, 1), 64);
            double t = median_seconds([&] {
                put_block<<<1, 256, 0, stream>>>(dst, src, n, 1, repeats);
                CHECK(cudaStreamSynchronize(stream));
            });
            printf("put          nvshmem  %10zu B  nvshmem %10.2f us %8.3f GB/s\n", n,
                   t / repeats * 1e6, n / (t / repeats) / 1e9);
        }
        int repeats = 200;
        double t = median_seconds([&] {
            put_8b<<<1, 1, 0, stream>>>(dst, src, 1, repeats);
            CHECK(cudaStreamSynchronize(stream));
        });
        printf("latency_8b   nvshmem  %10d B  nvshmem %10.2f us\n", 8, t / repeats * 1e6);
    }
    nvshmem_barrier_all();
    const size_t reduces[] = {8, 256, 4 << 10, 64 << 10, MIB, 4 * MIB, 16 * MIB, 64 * MIB};
    for (size_t n : reduces) {
        size_t count = n / sizeof(float);
        double t = median_seconds([&] {
            nvshmemx_float_sum_reduce_on_stream(NVSHMEM_TEAM_WORLD, (float *)dst, (float *)src,
                                                count, stream);
            CHECK(cudaStreamSynchronize(stream));
        });
        double slowest;
        MPI_Allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (rank == 0)
            printf("all_reduce   nvshmem  %10zu B  nvshmem %10.2f us %8.3f GB/s\n", n,
                   slowest * 1e6, n / slowest / 1e9);
    }
    nvshmem_barrier_all();
    nvshmem_free(src);
    nvshmem_free(dst);
    nvshmem_finalize();
    MPI_Finalize();
    return 0;
}
