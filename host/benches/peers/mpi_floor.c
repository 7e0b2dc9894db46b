// The wire's ceiling for the staged engine path, on the machine it runs on: how fast this
// MPI moves a 64 MiB put in pieces the way the engine's proxies do (a header message,
// the piece as a message of its own into one of 16 receive slots, a reply per piece, 16
// pieces in flight), against MPI_Put of the same bytes into an MPI_Win_allocate window
// (the engine bench's reference), whole and in pieces with a flush after each.
//
// Then the small request's round trip (`latency`): a header, its data in the header or as a
// message of its own, the target's reply, each side polling with MPI_Test as a proxy does,
// under MPI_THREAD_MULTIPLE (which the engine needs): the wire's share of a small staged
// put's cost, at sizes around this MPI's eager limit.
//
// Build and run (2 ranks, as the engine bench's emulated nodes):
//   mpicc -O2 -o /tmp/mpi_floor host/benches/peers/mpi_floor.c
//   mpirun -np 2 /tmp/mpi_floor
// Prints one line per (method, piece size): median time of 7 samples and GB/s.
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOTAL (64u << 20)
#define SLOTS 16
#define SAMPLES 7
#define TAG_REQ 1
#define TAG_DATA 2
#define TAG_REPLY 3

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v) {
  qsort(v, SAMPLES, sizeof(double), cmp);
  return v[SAMPLES / 2];
}

// Rank 0 streams TOTAL bytes to rank 1 in `piece`-byte messages, SLOTS in flight; rank 1
// receives each header then its data into the next of SLOTS slots and replies.
static double messages(int rank, char *src, char *slots, size_t piece) {
  size_t n = TOTAL / piece;
  uint64_t header[6] = {0};
  uint64_t reply[2] = {0};
  MPI_Barrier(MPI_COMM_WORLD);
  double t = MPI_Wtime();
  if (rank == 0) {
    MPI_Request req[SLOTS][3];
    uint64_t replies[SLOTS][2];
    uint64_t headers[SLOTS][6];
    for (size_t i = 0; i < n; i++) {
      size_t s = i % SLOTS;
      if (i >= SLOTS) MPI_Waitall(3, req[s], MPI_STATUSES_IGNORE);
      headers[s][0] = i;
      MPI_Irecv(replies[s], 2, MPI_UINT64_T, 1, TAG_REPLY, MPI_COMM_WORLD, &req[s][0]);
      MPI_Isend(headers[s], 6, MPI_UINT64_T, 1, TAG_REQ, MPI_COMM_WORLD, &req[s][1]);
      MPI_Isend(src + i * piece, (int)piece, MPI_BYTE, 1, TAG_DATA, MPI_COMM_WORLD, &req[s][2]);
    }
    for (size_t s = 0; s < SLOTS && s < n; s++) MPI_Waitall(3, req[s], MPI_STATUSES_IGNORE);
  } else {
    MPI_Request out[SLOTS];
    for (int s = 0; s < SLOTS; s++) out[s] = MPI_REQUEST_NULL;
    for (size_t i = 0; i < n; i++) {
      size_t s = i % SLOTS;
      MPI_Recv(header, 6, MPI_UINT64_T, 0, TAG_REQ, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Recv(slots + s * piece, (int)piece, MPI_BYTE, 0, TAG_DATA, MPI_COMM_WORLD,
               MPI_STATUS_IGNORE);
      MPI_Wait(&out[s], MPI_STATUS_IGNORE);
      MPI_Isend(reply, 2, MPI_UINT64_T, 0, TAG_REPLY, MPI_COMM_WORLD, &out[s]);
    }
    MPI_Waitall(SLOTS, out, MPI_STATUSES_IGNORE);
  }
  t = MPI_Wtime() - t;
  MPI_Barrier(MPI_COMM_WORLD);
  return t;
}

// Rank 0 puts TOTAL bytes into rank 1's window in `piece`-byte MPI_Puts, flushing after
// `every` pieces (and at the end).
static double window_puts(int rank, char *src, MPI_Win win, size_t piece, size_t every) {
  size_t n = TOTAL / piece;
  MPI_Barrier(MPI_COMM_WORLD);
  double t = MPI_Wtime();
  if (rank == 0) {
    for (size_t i = 0; i < n; i++) {
      MPI_Put(src + i * piece, (int)piece, MPI_BYTE, 1, (MPI_Aint)(i * piece), (int)piece,
              MPI_BYTE, win);
      if ((i + 1) % every == 0 || i + 1 == n) MPI_Win_flush(1, win);
    }
  }
  t = MPI_Wtime() - t;
  MPI_Barrier(MPI_COMM_WORLD);
  return t;
}

// Rank 0 sends a 48-byte header carrying `inline_bytes` of data, then `own_bytes` as a
// message of its own; rank 1 receives both and replies with 16 bytes; rank 0 polls for the
// reply. Returns the median round trip over `rounds`, in seconds (rank 0's).
static double latency(int rank, char *buf, int inline_bytes, int own_bytes, int rounds) {
  double *t = malloc(sizeof(double) * rounds);
  uint64_t reply[2] = {0};
  MPI_Barrier(MPI_COMM_WORLD);
  for (int i = 0; i < rounds; i++) {
    if (rank == 0) {
      double t0 = MPI_Wtime();
      MPI_Request r[3];
      int done = 0;
      MPI_Irecv(reply, 2, MPI_UINT64_T, 1, TAG_REPLY, MPI_COMM_WORLD, &r[0]);
      MPI_Isend(buf, 48 + inline_bytes, MPI_BYTE, 1, TAG_REQ, MPI_COMM_WORLD, &r[1]);
      r[2] = MPI_REQUEST_NULL;
      if (own_bytes > 0)
        MPI_Isend(buf + 65536, own_bytes, MPI_BYTE, 1, TAG_DATA, MPI_COMM_WORLD, &r[2]);
      while (!done) MPI_Test(&r[0], &done, MPI_STATUS_IGNORE);
      MPI_Waitall(2, &r[1], MPI_STATUSES_IGNORE);
      t[i] = MPI_Wtime() - t0;
    } else {
      int flag = 0;
      MPI_Message m;
      MPI_Status st;
      while (!flag) MPI_Improbe(0, TAG_REQ, MPI_COMM_WORLD, &flag, &m, &st);
      MPI_Mrecv(buf, 48 + inline_bytes, MPI_BYTE, &m, MPI_STATUS_IGNORE);
      if (own_bytes > 0)
        MPI_Recv(buf + 65536, own_bytes, MPI_BYTE, 0, TAG_DATA, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Request r;
      int done = 0;
      MPI_Isend(reply, 2, MPI_UINT64_T, 0, TAG_REPLY, MPI_COMM_WORLD, &r);
      while (!done) MPI_Test(&r, &done, MPI_STATUS_IGNORE);
    }
  }
  double m = 0;
  if (rank == 0) {
    qsort(t, rounds, sizeof(double), cmp);
    m = t[rounds / 2];
  }
  free(t);
  MPI_Barrier(MPI_COMM_WORLD);
  return m;
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 2) {
    if (rank == 0) fprintf(stderr, "mpi_floor: run with -np 2\n");
    MPI_Finalize();
    return 2;
  }
  char *src = malloc(TOTAL);
  char *slots = malloc((size_t)SLOTS << 20);
  memset(src, 7, TOTAL);
  memset(slots, 0, (size_t)SLOTS << 20);
  char *base;
  MPI_Win win;
  MPI_Win_allocate(TOTAL, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
  MPI_Win_lock_all(0, win);
  // latency: data in the header (8 B, 1 KiB, 4 KiB), or 4 KiB (and the eager limit's
  // neighbours) as a message of its own, or 4 KiB split 1 KiB in the header, 3 KiB after.
  {
    int cases[][2] = {{8, 0}, {1024, 0}, {4096, 0}, {0, 4096}, {1024, 3072}, {0, 4000}, {0, 2048}};
    for (int c = 0; c < 7; c++) {
      double m = latency(rank, slots, cases[c][0], cases[c][1], 2000);
      if (rank == 0)
        printf("latency        header+%5d B, own message %5d B  %7.2f us (round trip, median)\n",
               cases[c][0], cases[c][1], m * 1e6);
    }
  }
  size_t pieces[] = {4u << 10, 64u << 10, 256u << 10, 1u << 20};
  double v[SAMPLES];
  for (int p = 0; p < 4; p++) {
    for (int k = 0; k < SAMPLES; k++) v[k] = messages(rank, src, slots, pieces[p]);
    double m = median(v);
    if (rank == 0)
      printf("messages       piece %8zu B  %9.1f us  %6.2f GB/s\n", pieces[p], m * 1e6,
             TOTAL / m / 1e9);
    for (int k = 0; k < SAMPLES; k++) v[k] = window_puts(rank, src, win, pieces[p], 1);
    m = median(v);
    if (rank == 0)
      printf("put+flush each piece %8zu B  %9.1f us  %6.2f GB/s\n", pieces[p], m * 1e6,
             TOTAL / m / 1e9);
  }
  for (int k = 0; k < SAMPLES; k++) v[k] = window_puts(rank, src, win, TOTAL, 1);
  double m = median(v);
  if (rank == 0)
    printf("put whole      %8u B  %9.1f us  %6.2f GB/s\n", TOTAL, m * 1e6, TOTAL / m / 1e9);
  MPI_Win_unlock_all(win);
  MPI_Win_free(&win);
  free(src);
  free(slots);
  MPI_Finalize();
  return 0;
}
