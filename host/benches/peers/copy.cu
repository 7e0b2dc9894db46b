// Peer baseline for host/benches/cuda.rs: a plain CUDA C++ 16-byte copy and cudaMemcpyAsync
// D2D, timed like the Rust bench (same sizes, samples, batches replayed from CUDA graphs,
// rotation of single launches; bytes read + written). Build: nvcc -O3 -arch=sm_90 copy.cu -o copy. Run: ./copy OUT.csv
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
  fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); exit(1); } } while (0)

// One 16-byte vector per thread, 256 threads per block: the shape DESIGN.md finding 3
// found fastest, and the Rust kernel's default grid.
__global__ void copy16(int4* __restrict__ dst, const int4* __restrict__ src, size_t n) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = src[i];
}

static const size_t KIB = 1024, MIB = KIB * KIB, GIB = MIB * KIB, MAX = 2 * GIB;
static const int SAMPLES = 30, WARMUP = 5, MAX_BATCH = 100;
static const size_t BATCH_BYTES = 64 * MIB;

struct Row { const char* line; size_t bytes; int batch; double us, gbps, spread; };

static double pct(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[(size_t)((v.size() - 1) * p + 0.5)];
}

int main(int argc, char** argv) {
  const char* out = argc > 1 ? argv[1] : "cpp.csv";
  size_t sizes[] = {4 * KIB, 16 * KIB, 64 * KIB, 256 * KIB, MIB, 4 * MIB, 16 * MIB,
                    64 * MIB, 256 * MIB, GIB, 2 * GIB};
  char *src, *dst;
  CK(cudaMalloc(&src, MAX));
  CK(cudaMalloc(&dst, MAX + 4096));
  {  // pseudo-random source, no zeros (never time on zeros)
    std::vector<unsigned char> h(16 * MIB);
    unsigned long long x = 0x9e3779b97f4a7c15ull;
    for (auto& b : h) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; b = (unsigned char)(x % 255 + 1); }
    for (size_t o = 0; o < MAX; o += h.size()) CK(cudaMemcpy(src + o, h.data(), h.size(), cudaMemcpyHostToDevice));
  }
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<Row> rows;
  for (size_t size : sizes) {
    int batch = (int)std::min<size_t>(std::max<size_t>(BATCH_BYTES / size, 1), MAX_BATCH);
    size_t slots = std::max<size_t>(MAX / size, 1), next = 0;
    auto enqueue = [&](int line, size_t first) {
      for (int b = 0; b < batch; b++) {
        size_t off = ((first + b) % slots) * size;
        if (line == 0) {
          size_t n = size / 16;
          unsigned blocks = (unsigned)((n + 255) / 256);
          copy16<<<blocks, 256, 0, s>>>((int4*)(dst + off), (const int4*)(src + off), n);
          CK(cudaGetLastError());
        } else {
          CK(cudaMemcpyAsync(dst + off, src + off, size, cudaMemcpyDeviceToDevice, s));
        }
      }
    };
    // A batch is captured once per line into a graph over the first `batch` slots and
    // replayed every sample, as the Rust bench and iris_put.py do.
    cudaGraphExec_t graphs[2] = {nullptr, nullptr};
    if (batch > 1) {
      for (int line = 0; line < 2; line++) {
        cudaGraph_t g;
        CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
        enqueue(line, 0);
        CK(cudaStreamEndCapture(s, &g));
        CK(cudaGraphInstantiate(&graphs[line], g, 0));
        CK(cudaGraphDestroy(g));
      }
    }
    std::vector<double> ms[2];
    for (int sample = 0; sample < WARMUP + SAMPLES; sample++) {
      for (int line = 0; line < 2; line++) {
        CK(cudaEventRecord(e0, s));
        if (graphs[line]) CK(cudaGraphLaunch(graphs[line], s));
        else enqueue(line, next++);
        CK(cudaEventRecord(e1, s));
        CK(cudaEventSynchronize(e1));
        float t;
        CK(cudaEventElapsedTime(&t, e0, e1));
        if (sample >= WARMUP) ms[line].push_back(t);
      }
    }
    for (auto g : graphs) if (g) CK(cudaGraphExecDestroy(g));
    const char* names[2] = {"cpp_copy", "cuda_memcpy"};
    for (int line = 0; line < 2; line++) {
      std::vector<double> g;
      for (double t : ms[line]) g.push_back(2.0 * size * batch / (t * 1e-3) / 1e9);
      double med = pct(g, 0.5);
      rows.push_back({names[line], size, batch, pct(ms[line], 0.5) * 1e3 / batch, med,
                      (pct(g, 0.9) - pct(g, 0.1)) / med * 100});
    }
    // check the copy kernel at this size (offset 0), with a guard after it
    CK(cudaMemsetAsync(dst, 0xee, size + 4096, s));
    size_t n = size / 16;
    copy16<<<(unsigned)((n + 255) / 256), 256, 0, s>>>((int4*)dst, (const int4*)src, n);
    CK(cudaGetLastError());
    CK(cudaStreamSynchronize(s));
    size_t chk = std::min(size, 64 * MIB);
    std::vector<unsigned char> a(chk), b(chk), guard(4096);
    CK(cudaMemcpy(a.data(), dst, chk, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(b.data(), src, chk, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(guard.data(), dst + size, 4096, cudaMemcpyDeviceToHost));
    bool ok = a == b;
    for (auto g : guard) ok = ok && g == 0xee;
    if (!ok) { fprintf(stderr, "cpp_copy of %zu bytes is wrong\n", size); return 1; }
    printf("%10zu B  cpp_copy %8.1f  cuda_memcpy %8.1f GB/s  (batch %d, verified)\n", size,
           rows[rows.size() - 2].gbps, rows.back().gbps, batch);
  }
  FILE* f = fopen(out, "w");
  if (!f) { perror(out); return 1; }
  fprintf(f, "tool,line,bytes,batch,samples,median_us,gbps,spread_pct\n");
  for (auto& r : rows)
    fprintf(f, "cpp,%s,%zu,%d,%d,%.3f,%.2f,%.2f\n", r.line, r.bytes, r.batch, SAMPLES, r.us, r.gbps, r.spread);
  fclose(f);
  printf("wrote %s\n", out);
  return 0;
}
