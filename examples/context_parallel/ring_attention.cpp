// Ring attention over N GPUs with NCCL: one process per GPU, launched by the user (or torchrun,
// whose variables it reads): RANK, WORLD_SIZE, LOCAL_RANK (the GPU ordinal; default RANK) and
// FA_CP_ID_FILE (a path on a file system every rank sees, absent at the start; rank 0 writes the
// NCCL unique id there, the others wait for it, up to 120 s). No MPI.
//
//   FA_CP_ID_FILE=/tmp/cp.id WORLD_SIZE=2 RANK=0 ./flashattn_ring_attention --seqlen-per-rank 65536 &
//   FA_CP_ID_FILE=/tmp/cp.id WORLD_SIZE=2 RANK=1 ./flashattn_ring_attention --seqlen-per-rank 65536
//
// Each rank holds its shard of Q, K and V (ring_schedule.hpp: contiguous, or zigzag for causal
// balance); the K/V shard it holds travels to rank + 1 by ncclSend/ncclRecv on a communication
// stream while the held shard's attention runs on the compute stream (double-buffered: events
// order a receive after the compute that last read its buffer, and the next step's compute after
// that receive). Partial results are merged with fa_merge_states. The program checks every rank's
// rows against single-GPU attention of the whole sequence and reports the ring's time beside the
// single GPU's, and beside the same passes with only the compute steps and with only the
// transfers, so that what the overlap hides shows.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "flashattn.h"
#include "ring_schedule.hpp"

namespace {

// An example may stop the program; the library never does.
[[noreturn]] void die(const char* file, int line, const char* call, const std::string& why) {
  std::fprintf(stderr, "%s:%d: %s: %s\n", file, line, call, why.c_str());
  std::exit(1);
}
#define CHECK_CUDA(x) \
  do { if (const cudaError_t e_ = (x); e_ != cudaSuccess) die(__FILE__, __LINE__, #x, cudaGetErrorString(e_)); } while (0)
#define CHECK_NCCL(x) \
  do { if (const ncclResult_t r_ = (x); r_ != ncclSuccess) die(__FILE__, __LINE__, #x, ncclGetErrorString(r_)); } while (0)
#define CHECK_FA(x)                                                                   \
  do {                                                                                \
    if (const fa_status s_ = (x); s_ != FA_STATUS_SUCCESS)                            \
      die(__FILE__, __LINE__, #x, std::string(fa_status_string(s_)) + ": " + fa_last_error_detail()); \
  } while (0)

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : fallback;
}

struct Options {
  int64_t seqlen_per_rank = 65536;
  int64_t batch = 1, heads_q = 32, heads_kv = 8, head_dim = 128;
  bool causal = true;
  ring::Layout layout = ring::Layout::zigzag;
  int iters = 5;
  bool check = true;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--seqlen-per-rank") o.seqlen_per_rank = std::atoll(v.c_str());
    else if (k == "--batch") o.batch = std::atoll(v.c_str());
    else if (k == "--heads-q") o.heads_q = std::atoll(v.c_str());
    else if (k == "--heads-kv") o.heads_kv = std::atoll(v.c_str());
    else if (k == "--head-dim") o.head_dim = std::atoll(v.c_str());
    else if (k == "--causal") o.causal = v != "0";
    else if (k == "--layout") o.layout = v == "contiguous" ? ring::Layout::contiguous : ring::Layout::zigzag;
    else if (k == "--iters") o.iters = std::max(1, std::atoi(v.c_str()));
    else if (k == "--check") o.check = v != "0";
    else {
      std::fprintf(stderr,
                   "usage: %s [--seqlen-per-rank N] [--batch B] [--heads-q H] [--heads-kv H] "
                   "[--head-dim D] [--causal 0|1] [--layout zigzag|contiguous] [--iters N] "
                   "[--check 0|1]\n", argv[0]);
      std::exit(2);
    }
  }
  return o;
}

// Rank 0 writes the id to path.tmp and renames it, so a reader never sees half a file. It refuses
// a path that exists: the other ranks may already have read a previous run's id from it.
ncclUniqueId share_id(int rank, const std::string& path) {
  ncclUniqueId id;
  if (rank == 0) {
    if (std::ifstream(path).good()) {
      die(__FILE__, __LINE__, "share_id", path + " exists (a previous run's NCCL id?): remove it");
    }
    CHECK_NCCL(ncclGetUniqueId(&id));
    std::ofstream(path + ".tmp", std::ios::binary).write(id.internal, sizeof(id.internal));
    std::rename((path + ".tmp").c_str(), path.c_str());
    return id;
  }
  for (int waited_ms = 0; waited_ms < 120000; waited_ms += 100) {
    std::ifstream in(path, std::ios::binary);
    if (in.read(id.internal, sizeof(id.internal))) {
      return id;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::fprintf(stderr, "rank %d: no NCCL id in %s after 120 s\n", rank, path.c_str());
  std::exit(1);
}

// bf16 of a value in [-1, 1) from a hash of (tensor, index): the same on every rank, so each
// builds the whole inputs for the single-GPU check without any transfer.
uint16_t input_bf16(uint64_t tensor, uint64_t index) {
  uint64_t z = (tensor << 56) ^ index;
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  const float f = static_cast<float>(static_cast<int64_t>(z >> 40) - (1 << 23)) / (1 << 23);
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);  // to nearest even
}

float bf16_to_float(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

std::vector<uint16_t> make_input(uint64_t tensor, size_t n) {
  std::vector<uint16_t> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = input_bf16(tensor, i);
  return x;
}

void* device_alloc(size_t bytes) {
  void* p = nullptr;
  CHECK_CUDA(cudaMalloc(&p, bytes));
  return p;
}

void device_copy(void* dst, const void* src, size_t bytes) {
  CHECK_CUDA(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
}

float elapsed_ms(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
  return ms;
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  const int rank = env_int("RANK", 0), world = env_int("WORLD_SIZE", 1);
  const int device = env_int("LOCAL_RANK", rank);
  const char* id_file = std::getenv("FA_CP_ID_FILE");
  if (world > 1 && id_file == nullptr) {
    std::fprintf(stderr, "set FA_CP_ID_FILE to a path every rank sees (the NCCL id goes there)\n");
    return 2;
  }
  CHECK_CUDA(cudaSetDevice(device));
  const ring::Schedule s(opt.seqlen_per_rank * world, world, opt.layout, opt.causal);
  ring::Problem p;
  p.dtype = FA_DTYPE_BF16;  // fa_merge_states on a GPU takes fp16 and bf16
  p.batch = opt.batch;
  p.heads_q = opt.heads_q;
  p.heads_kv = opt.heads_kv;
  p.head_dim = opt.head_dim;

  ncclComm_t comm;
  CHECK_NCCL(ncclCommInitRank(&comm, world, world > 1 ? share_id(rank, id_file) : [] {
    ncclUniqueId id;
    CHECK_NCCL(ncclGetUniqueId(&id));
    return id;
  }(), rank));
  fa_context_t* ctx = nullptr;
  CHECK_FA(fa_context_create(device, &ctx));
  cudaStream_t compute, comm_stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  CHECK_CUDA(cudaStreamCreateWithFlags(&comm_stream, cudaStreamNonBlocking));

  // Whole inputs on the host (every rank alike), then this rank's shards on the device.
  const int64_t S = s.seqlen(), d = p.head_dim;
  const size_t q_elems = static_cast<size_t>(p.batch * S * p.heads_q * d);
  const size_t kv_elems = static_cast<size_t>(p.batch * S * p.heads_kv * d);
  const std::vector<uint16_t> hq = make_input(1, q_elems), hk = make_input(2, kv_elems),
                              hv = make_input(3, kv_elems);
  const int64_t rows = s.shard_length(rank), max_rows = s.max_shard_length();
  const size_t q_shard = static_cast<size_t>(p.batch * rows * p.heads_q * d) * 2;
  const size_t kv_cap = static_cast<size_t>(p.batch * max_rows * p.heads_kv * d) * 2;
  ring::RankBuffers b;
  void* q = device_alloc(q_shard);
  b.q = q;
  b.o = device_alloc(q_shard);
  b.o_scratch = device_alloc(q_shard);
  const std::vector<ring::Chunk> chunks = s.chunks(rank);
  int64_t longest = 0;
  for (size_t c = 0; c < chunks.size(); ++c) {
    b.lse[c] = static_cast<float*>(
        device_alloc(static_cast<size_t>(p.batch * p.heads_q * chunks[c].length) * 4));
    longest = std::max(longest, chunks[c].length);
  }
  b.lse_scratch =
      static_cast<float*>(device_alloc(static_cast<size_t>(p.batch * p.heads_q * longest) * 4));
  void* kbuf[2] = {device_alloc(kv_cap), device_alloc(kv_cap)};
  void* vbuf[2] = {device_alloc(kv_cap), device_alloc(kv_cap)};
  void* own_k = device_alloc(kv_cap);
  void* own_v = device_alloc(kv_cap);
  ring::shard_rows(s, rank, p.batch, p.heads_q, d, 2, hq.data(), q, true, device_copy);
  ring::shard_rows(s, rank, p.batch, p.heads_kv, d, 2, hk.data(), own_k, true, device_copy);
  ring::shard_rows(s, rank, p.batch, p.heads_kv, d, 2, hv.data(), own_v, true, device_copy);

  // Events per buffer: "compute done with it" (a receive may overwrite it) and "received"
  // (compute may read it).
  const int n = world;
  cudaEvent_t computed[2], received[2], start, stop;
  for (int i = 0; i < 2; ++i) {
    CHECK_CUDA(cudaEventCreateWithFlags(&computed[i], cudaEventDisableTiming));
    CHECK_CUDA(cudaEventCreateWithFlags(&received[i], cudaEventDisableTiming));
  }
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  const auto bytes_of = [&](int origin) {
    return static_cast<size_t>(p.batch * s.shard_length(origin) * p.heads_kv * d) * 2;
  };

  // One pass of the ring: with `transfer` the held shard goes on by NCCL each step, with
  // `compute` each step's attention runs. Both is the ring; either alone times that part by
  // itself (compute alone reads stale buffers, transfers alone move shards nobody reads), so that
  // the printout shows how much of the transfers the overlap hides. Returns the pass's time.
  const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
  const auto pass = [&](bool transfer, bool compute_on) {
    // The own shard into the ring's first buffer (a copy, so that every pass starts alike), not
    // timed: an application would hold its shard there already.
    CHECK_CUDA(cudaMemcpyAsync(kbuf[0], own_k, bytes_of(rank), cudaMemcpyDeviceToDevice, compute));
    CHECK_CUDA(cudaMemcpyAsync(vbuf[0], own_v, bytes_of(rank), cudaMemcpyDeviceToDevice, compute));
    CHECK_CUDA(cudaEventRecord(start, compute));
    CHECK_CUDA(cudaEventRecord(received[0], compute));
    CHECK_CUDA(cudaEventRecord(received[1], compute));
    CHECK_CUDA(cudaEventRecord(computed[1], compute));  // buffer 1 is free before step 0
    for (int t = 0, cur = 0; t < n; ++t, cur ^= 1) {
      if (transfer && t + 1 < n) {
        // Send the held shard on, receive the next into the other buffer once its last reader
        // (step t - 1's compute) is done.
        CHECK_CUDA(cudaStreamWaitEvent(comm_stream, received[cur]));
        CHECK_CUDA(cudaStreamWaitEvent(comm_stream, computed[cur ^ 1]));
        const size_t out = bytes_of(s.kv_origin(rank, t)), in = bytes_of(s.kv_origin(rank, t + 1));
        CHECK_NCCL(ncclGroupStart());
        CHECK_NCCL(ncclSend(kbuf[cur], out, ncclChar, next, comm, comm_stream));
        CHECK_NCCL(ncclSend(vbuf[cur], out, ncclChar, next, comm, comm_stream));
        CHECK_NCCL(ncclRecv(kbuf[cur ^ 1], in, ncclChar, prev, comm, comm_stream));
        CHECK_NCCL(ncclRecv(vbuf[cur ^ 1], in, ncclChar, prev, comm, comm_stream));
        CHECK_NCCL(ncclGroupEnd());
        CHECK_CUDA(cudaEventRecord(received[cur ^ 1], comm_stream));
      }
      CHECK_CUDA(cudaStreamWaitEvent(compute, received[cur]));
      if (compute_on) {
        b.k = kbuf[cur];
        b.v = vbuf[cur];
        CHECK_FA(ring::run_step(ctx, reinterpret_cast<fa_stream_t>(compute), s, p, rank, t, b));
      }
      CHECK_CUDA(cudaEventRecord(computed[cur], compute));
    }
    CHECK_CUDA(cudaEventRecord(stop, compute));
    CHECK_CUDA(cudaEventSynchronize(stop));
    CHECK_CUDA(cudaStreamSynchronize(comm_stream));
    return static_cast<double>(elapsed_ms(start, stop));
  };
  // Each pass once to warm up (kernel choice, NCCL connections), then --iters times; every rank
  // runs the same passes in the same order, so the transfers always find their peers.
  const auto mean_ms = [&](bool transfer, bool compute_on) {
    pass(transfer, compute_on);
    double ms = 0;
    for (int it = 0; it < opt.iters; ++it) ms += pass(transfer, compute_on) / opt.iters;
    return ms;
  };
  const double ring_ms = mean_ms(true, true);
  std::vector<uint16_t> mine(q_shard / 2);  // the ring's result, before the passes below
  device_copy(mine.data(), b.o, q_shard);
  const double compute_ms = mean_ms(false, true);
  const double transfer_ms = n > 1 ? mean_ms(true, false) : 0.0;
  size_t moved = 0;
  for (int t = 0; t + 1 < n; ++t) moved += 2 * bytes_of(s.kv_origin(rank, t));
  // Where the transfers hide behind the compute the ring takes compute alone's time; the rest
  // of its excess is the wait for the slowest rank (each step needs the previous rank's shard).
  std::printf("rank %d/%d: %lld rows (%s, %s), ring %.3f ms; alone: compute %.3f ms, transfers "
              "%.3f ms (%.1f GB/s sent); the ring takes %.3fx compute alone (%+.3f ms)\n",
              rank, n, static_cast<long long>(rows),
              opt.layout == ring::Layout::zigzag ? "zigzag" : "contiguous",
              opt.causal ? "causal" : "full", ring_ms, compute_ms, transfer_ms,
              transfer_ms > 0 ? moved / transfer_ms * 1e-6 : 0.0, ring_ms / compute_ms,
              ring_ms - compute_ms);

  if (opt.check) {
    // Single-GPU attention of the whole sequence on this GPU, timed, then this rank's rows.
    fa_config c;
    CHECK_FA(fa_config_init(&c));
    c.dtype = p.dtype;
    c.causal = opt.causal ? 1 : 0;
    c.batch = p.batch;
    c.seqlen_q = c.seqlen_k = S;
    c.heads_q = p.heads_q;
    c.heads_kv = p.heads_kv;
    c.head_dim = d;
    void* fq = device_alloc(q_elems * 2);
    void* fk = device_alloc(kv_elems * 2);
    void* fv = device_alloc(kv_elems * 2);
    void* fo = device_alloc(q_elems * 2);
    device_copy(fq, hq.data(), q_elems * 2);
    device_copy(fk, hk.data(), kv_elems * 2);
    device_copy(fv, hv.data(), kv_elems * 2);
    // One warm-up call, then --iters calls back to back between two events.
    const auto single_call = [&] {
      CHECK_FA(fa_forward(ctx, &c, fq, fk, fv, fo, nullptr, reinterpret_cast<fa_stream_t>(compute)));
    };
    single_call();
    CHECK_CUDA(cudaEventRecord(start, compute));
    for (int it = 0; it < opt.iters; ++it) single_call();
    CHECK_CUDA(cudaEventRecord(stop, compute));
    CHECK_CUDA(cudaEventSynchronize(stop));
    const double single_ms = elapsed_ms(start, stop) / opt.iters;
    std::vector<uint16_t> single(q_elems);
    device_copy(single.data(), fo, q_elems * 2);
    std::vector<uint16_t> single_rows(mine.size());
    ring::shard_rows(s, rank, p.batch, p.heads_q, d, 2, single.data(), single_rows.data(), true,
                     [](void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); });
    // The bf16 bound. Both sides round P to bf16 (2^-8 relative, 2^-9 error) against different
    // running maxima, and round O: the ring N partials and N - 1 merges, the single GPU once.
    // A partial covers fewer keys than the whole row, so its values reach past the final O's:
    // each rounding moves an output by 2^-9 of the largest value in its row (over heads_q x
    // head_dim), and |ring - single| <= (N + 2) 2^-8 (|O| + the row's largest |O|) leaves a
    // margin of 2 over N + 2 roundings. (With the row's rms in place of its largest value, 5
    // of 67M elements failed on an H200 at N = 1, 16k rows, d 128, 32/8 heads, causal zigzag,
    // at 1.06 times that bound: the float64 values showed the ring's partials' rounding, not a
    // wrong result.) A K/V shard dropped or counted twice moves a row by about its rms, a
    // quarter to a fifth of its largest value: 13 to 16 times the bound at N = 2.
    const int64_t row = p.heads_q * d;
    const double bound = (n + 2) * std::ldexp(1.0, -8);
    double max_err = 0, worst = 0;
    size_t bad = 0;
    for (size_t r0 = 0; r0 < mine.size(); r0 += static_cast<size_t>(row)) {
      double top = 0;
      for (int64_t i = 0; i < row; ++i) {
        top = std::max<double>(top, std::fabs(bf16_to_float(single_rows[r0 + static_cast<size_t>(i)])));
      }
      for (int64_t i = 0; i < row; ++i) {
        const size_t at = r0 + static_cast<size_t>(i);
        const double ref = bf16_to_float(single_rows[at]);
        const double err = std::fabs(bf16_to_float(mine[at]) - ref);
        const double allowed = bound * (std::fabs(ref) + top);
        max_err = std::isfinite(err) ? std::max(max_err, err) : INFINITY;
        worst = std::isfinite(err) ? std::max(worst, err / allowed) : INFINITY;
        bad += !(err <= allowed);
      }
    }
    std::printf("rank %d/%d: single GPU %.3f ms over %lld rows (ring speed-up %.2fx); "
                "max |ring - single| %.3g, the worst element at %.2f of the bf16 bound, %zu of "
                "%zu outside it\n", rank, n, single_ms, static_cast<long long>(S),
                single_ms / ring_ms, max_err, worst, bad, mine.size());
    for (void* ptr : {fq, fk, fv, fo}) CHECK_CUDA(cudaFree(ptr));
    if (bad != 0) return 1;
  }
  for (void* ptr : {q, b.o, b.o_scratch, kbuf[0], kbuf[1], vbuf[0], vbuf[1], own_k, own_v,
                    static_cast<void*>(b.lse[0]), static_cast<void*>(b.lse[1]),
                    static_cast<void*>(b.lse_scratch)}) {
    CHECK_CUDA(cudaFree(ptr));  // cudaFree(nullptr) (no second chunk) is a no-op
  }
  CHECK_NCCL(ncclCommDestroy(comm));
  fa_context_destroy(ctx);
  return 0;
}
