// The floor under a staged small put (issue 31: "a 4 KiB staged put costs under 15 us"):
// what each piece of the path costs on this GPU and host, measured alone, so that the
// engine's own 4 KiB time can be read against the sum of its parts.
//
//   htod       the target's apply today: cudaMemcpyAsync from page-locked memory on a
//              non-blocking stream, an event behind it, the host polling the event
//   applier    the alternative: a resident kernel polling a page-locked inbox, copying the
//              bytes into device memory and answering through page-locked memory; then
//              with one bus read per poll, and a fence of system or GPU scope (packed/...)
//   pingpong   the origin's floor: a GPU thread posts a word to host memory and waits for
//              a host thread's answer (the proxy noticing a request and completing it)
//   stage      a GPU thread (and a warp) storing n bytes into page-locked memory, then a
//              system fence: a staged put's copy into its slot
//   hostread   one GPU load of a page-locked word (a ring word read over the bus)
//
// Build and run (device machine): nvcc -O2 -arch=sm_90 -o small_put_floor small_put_floor.cu
// && ./small_put_floor  (medians of 2000 samples per line, microseconds).
#include <cuda_runtime.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#define CHECK(x)                                                                     \
  do {                                                                               \
    cudaError_t e = (x);                                                             \
    if (e != cudaSuccess) {                                                          \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)

static const int SAMPLES = 2000;
static double now_us() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// ---- applier: a resident kernel serving an inbox in page-locked memory ----------------
struct Inbox {
  volatile unsigned long long seq;   // written by the host last
  volatile unsigned long long len;
  volatile unsigned long long done;  // written by the kernel
  volatile unsigned long long stop;
  unsigned char pad[256 - 32];
  unsigned char bytes[1 << 16];
};

__global__ void applier(Inbox* in, unsigned char* dst) {
  __shared__ unsigned long long seen, len;
  unsigned long long last = 0;
  for (;;) {
    if (threadIdx.x == 0) {
      unsigned long long s;
      while ((s = in->seq) == last && !in->stop) {
      }
      seen = in->stop ? 0 : s;
      len = in->len;
    }
    __syncthreads();
    if (seen == 0) return;
    last = seen;
    const uint4* src = reinterpret_cast<const uint4*>(const_cast<unsigned char*>(in->bytes));
    uint4* d = reinterpret_cast<uint4*>(dst);
    for (unsigned long long i = threadIdx.x; i < len / 16; i += blockDim.x) {
      d[i] = __ldcv(src + i);  // not cached: the host rewrites the inbox
    }
    for (unsigned long long i = (len / 16) * 16 + threadIdx.x; i < len; i += blockDim.x) {
      dst[i] = in->bytes[i];
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      __threadfence_system();
      in->done = last;
    }
  }
}

// One 16-byte volatile load (`__ldcv` is not volatile asm: the compiler may hoist it out of
// a polling loop, and did).
__device__ ulonglong2 load_volatile_16(const ulonglong2* p) {
  ulonglong2 v;
  asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(v.x), "=l"(v.y) : "l"(p) : "memory");
  return v;
}

// The same with one bus read per poll (the sequence number and length in one 16-byte load)
// and a fence of GPU scope before the answer (`system`: whether the answer is ordered after
// the copy for the host too; the target's own kernels are what read the bytes).
__global__ void applier_packed(Inbox* in, unsigned char* dst, bool system) {
  __shared__ unsigned long long seen, len;
  unsigned long long last = 0;
  const ulonglong2* head = reinterpret_cast<const ulonglong2*>(in);
  for (;;) {
    if (threadIdx.x == 0) {
      ulonglong2 h;
      do {
        h = load_volatile_16(head);
      } while (h.x == last && !in->stop);
      seen = in->stop ? 0 : h.x;
      len = h.y;
    }
    __syncthreads();
    if (seen == 0) return;
    last = seen;
    const uint4* src = reinterpret_cast<const uint4*>(in->bytes);
    uint4* d = reinterpret_cast<uint4*>(dst);
    for (unsigned long long i = threadIdx.x; i < len / 16; i += blockDim.x) d[i] = __ldcv(src + i);
    for (unsigned long long i = (len / 16) * 16 + threadIdx.x; i < len; i += blockDim.x) dst[i] = in->bytes[i];
    __syncthreads();
    if (threadIdx.x == 0) {
      if (system) __threadfence_system(); else __threadfence();
      in->done = last;
    }
  }
}

// ---- pingpong: a GPU thread and a host thread answering each other --------------------
__global__ void pinger(volatile unsigned long long* ping, volatile unsigned long long* pong,
                       int rounds) {
  for (int i = 1; i <= rounds; i++) {
    *ping = i;
    __threadfence_system();
    while (*pong != (unsigned long long)i) {
    }
  }
}

// ---- stage / hostread: timed on the device (globaltimer, ns) --------------------------
__device__ unsigned long long globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void stage(unsigned char* host, const unsigned char* src, int n, int lanes,
                      int rounds, unsigned long long* ns) {
  if (threadIdx.x >= lanes) return;
  unsigned long long t0 = globaltimer();
  for (int r = 0; r < rounds; r++) {
    const uint4* s = reinterpret_cast<const uint4*>(src);
    uint4* d = reinterpret_cast<uint4*>(host);
    for (int i = threadIdx.x; i < n / 16; i += lanes) d[i] = s[i];
    if (n < 16 && threadIdx.x == 0) *reinterpret_cast<unsigned long long*>(host) = *reinterpret_cast<const unsigned long long*>(src);
    __threadfence_system();
    __syncwarp();
  }
  if (threadIdx.x == 0) *ns = globaltimer() - t0;
}

__global__ void hostread(volatile unsigned long long* word, int rounds, unsigned long long* ns,
                         unsigned long long* sink) {
  unsigned long long t0 = globaltimer(), acc = 0;
  for (int r = 0; r < rounds; r++) acc += *word;
  *ns = globaltimer() - t0;
  *sink = acc;
}

int main() {
  setvbuf(stdout, nullptr, _IONBF, 0);
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  printf("device: %s\n", prop.name);
  cudaStream_t s, serve;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&serve, cudaStreamNonBlocking));
  unsigned char *dev, *pinned;
  CHECK(cudaMalloc(&dev, 1 << 20));
  CHECK(cudaHostAlloc(&pinned, 1 << 20, cudaHostAllocMapped | cudaHostAllocPortable));
  memset(pinned, 7, 1 << 20);
  cudaEvent_t ev;
  CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  const int sizes[] = {8, 4096, 65536};

  // htod: the copy engine's round trip, as CudaEngineHeap makes it.
  for (int n : sizes) {
    std::vector<double> t;
    for (int i = 0; i < SAMPLES; i++) {
      double t0 = now_us();
      CHECK(cudaMemcpyAsync(dev, pinned, n, cudaMemcpyHostToDevice, s));
      CHECK(cudaEventRecord(ev, s));
      cudaError_t q;
      while ((q = cudaEventQuery(ev)) == cudaErrorNotReady) {
      }
      CHECK(q);
      t.push_back(now_us() - t0);
    }
    printf("htod      %6d B: %7.2f us (copy + event, polled)\n", n, median(t));
  }

  // applier: a resident kernel, the host posting and waiting for its answer; as written
  // first, then with one bus read per poll and each fence scope.
  for (int variant = 0; variant < 3; variant++) {
    const char* name[] = {"applier", "packed/sys", "packed/gpu"};
    Inbox* in;
    CHECK(cudaHostAlloc(&in, sizeof(Inbox), cudaHostAllocMapped | cudaHostAllocPortable));
    memset(in, 0, sizeof(Inbox));
    Inbox* din;
    CHECK(cudaHostGetDevicePointer((void**)&din, in, 0));
    if (variant == 0) applier<<<1, 256, 0, serve>>>(din, dev);
    else applier_packed<<<1, 256, 0, serve>>>(din, dev, variant == 1);
    CHECK(cudaGetLastError());
    unsigned long long seq = 0;
    for (int n : sizes) {
      std::vector<double> t;
      for (int i = 0; i < SAMPLES; i++) {
        double t0 = now_us();
        memcpy(in->bytes, pinned, n);
        in->len = n;
        std::atomic_thread_fence(std::memory_order_release);
        in->seq = ++seq;
        while (in->done != seq && now_us() - t0 < 1e6) {
        }
        if (in->done != seq) {
          printf("%-10s%6d B: no answer within 1 s (sample %d)\n", name[variant], n, i);
          exit(1);
        }
        t.push_back(now_us() - t0);
      }
      printf("%-10s%6d B: %7.2f us (host fills the inbox, kernel copies, answers)\n", name[variant], n,
             median(t));
    }
    in->stop = 1;
    CHECK(cudaStreamSynchronize(serve));
    std::vector<unsigned char> back(65536);
    CHECK(cudaMemcpy(back.data(), dev, 65536, cudaMemcpyDeviceToHost));
    printf("%-10scopy %s\n", name[variant], memcmp(back.data(), pinned, 65536) ? "WRONG" : "exact");
    CHECK(cudaFreeHost(in));
  }

  // pingpong: GPU thread <-> host thread through page-locked words.
  {
    unsigned long long* words;
    CHECK(cudaHostAlloc(&words, 256, cudaHostAllocMapped | cudaHostAllocPortable));
    memset(words, 0, 256);
    volatile unsigned long long* ping = words;
    volatile unsigned long long* pong = words + 16;
    unsigned long long* dw;
    CHECK(cudaHostGetDevicePointer((void**)&dw, words, 0));
    const int rounds = 20000;
    double t0 = now_us();
    pinger<<<1, 1, 0, s>>>(dw, dw + 16, rounds);
    CHECK(cudaGetLastError());
    for (int i = 1; i <= rounds; i++) {
      while (*ping != (unsigned long long)i) {
      }
      *pong = i;
    }
    CHECK(cudaStreamSynchronize(s));
    printf("pingpong         : %7.2f us per round trip (GPU posts, host answers; mean of %d)\n",
           (now_us() - t0) / rounds, rounds);
    CHECK(cudaFreeHost(words));
  }

  // stage and hostread, timed on the device.
  {
    unsigned char* dhost;
    CHECK(cudaHostGetDevicePointer((void**)&dhost, pinned, 0));
    unsigned long long* ns;
    CHECK(cudaMallocManaged(&ns, 64));
    const int rounds = 1000;
    for (int n : sizes) {
      for (int lanes : {1, 32, 256}) {
        stage<<<1, 256, 0, s>>>(dhost, dev, n, lanes, rounds, ns);
        CHECK(cudaStreamSynchronize(s));
        printf("stage     %6d B, %3d lanes: %7.2f us (stores + system fence)\n", n, lanes,
               ns[0] / 1000.0 / rounds);
      }
    }
    hostread<<<1, 1, 0, s>>>((volatile unsigned long long*)dhost, rounds, ns, ns + 1);
    CHECK(cudaStreamSynchronize(s));
    printf("hostread         : %7.2f us per load of a page-locked word\n",
           ns[0] / 1000.0 / rounds);
  }
  return 0;
}
