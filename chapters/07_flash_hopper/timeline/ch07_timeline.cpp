// ch07_timeline: chapter 07's measured timeline. Built only with the CMake option
// FA_CH07_TIMELINE (default OFF), from the forward rungs v1-v4 compiled again with their phase
// marks on (ch07_timeline.cuh). It runs each rung at one shape after warm-up, records what the
// leader thread of every warpgroup of the first --pool thread blocks did and when (TMA and
// barrier waits, QK^T, softmax, PV, the ping-pong's named-barrier waits), and writes one CSV row
// per phase of blocks 0 .. --blocks-1 and of the blocks that shared an SM with them at the time:
//
//   kernel,block,warpgroup,phase,t_start_ns,t_end_ns,tile,sm
//
// times in ns from the launch's first recorded event (ch07_timeline.h converts the SM's cycles).
// notes/figures/ch07_timeline.py draws it. On an H100 (bench/device_run.sh, stage timeline07):
//
//   cmake -S . -B build-timeline -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 -DFA_CH07_TIMELINE=ON
//   cmake --build build-timeline --target ch07_timeline
//   build-timeline/bin/ch07_timeline --out=ch07_timeline.csv
//
// The shape is the protocol's: bf16, N = --seq, B = 16384 / N, H = 2048 / D, not causal. Every
// rung's O is compared with v1's (they compute the same thing in another order), so a mark that
// broke a kernel shows as a failure, not as a plausible picture. Without a GPU the program checks
// the cycle-to-ns conversion on a synthetic launch and exits 0.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <exception>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "buffer.h"
#include "ch07_timeline.h"
#include "check.h"
#include "cli.h"
#include "device_fill.h"
#include "gpu.h"
#include "registry.h"

namespace {

namespace tl = fa::ch07::timeline;
using fa::AttentionFwdKernel;
using fa::DType;

const char* const kRungs[] = {"07/v1_tma_wgmma", "07/v2_warp_specialized", "07/v3_pingpong",
                              "07/v4_intra_overlap"};

// ---- Without a GPU: the conversion on a launch made up here. Returns the number of failures. ---
int check_conversion() {
  // One block, two warpgroups. The anchor's low 32 bits sit just below 2^32, so the events wrap.
  // %globaltimer counts ns since the epoch (about 1.8e18 in 2026): a double holds such a number
  // only to 256 ns, so the conversion must subtract before it converts.
  const int blocks = 1;
  std::vector<tl::Event> raw(size_t(blocks) * tl::kMaxWarpgroups * tl::kSlotEvents, tl::Event{});
  const uint64_t g0 = 1795000000123456789ull, c0 = (uint64_t(5) << 32) - 1000;
  const double ghz = 1.5;  // cycles per ns
  auto slot = [&](int w) { return &raw[size_t(w) * tl::kSlotEvents]; };
  auto put = [&](int w, uint64_t start_anchor, std::vector<tl::Event> events) {
    tl::Header h{};
    h.g0 = g0 + uint64_t(double(start_anchor - c0) / ghz);
    h.c0 = start_anchor;
    h.sm = 7;
    h.count = uint32_t(events.size());
    const uint64_t last = c0 + 60000;  // the latest event: 40 us after the anchor
    h.g1 = g0 + uint64_t(double(last - c0) / ghz);
    h.c1 = last;
    std::memcpy(slot(w), &h, sizeof h);
    std::copy(events.begin(), events.end(), slot(w) + tl::kHeaderEvents);
  };
  auto ev = [&](uint64_t from, uint64_t to, uint32_t phase, uint32_t tile) {
    return tl::Event{uint32_t(c0 + from), uint32_t(c0 + to), phase, tile};
  };
  put(0, c0, {ev(300, 1800, tl::kQK, 0), ev(1800, 3300, tl::kSoftmax, 0)});
  put(1, c0 + 150, {ev(1500, 3000, tl::kWaitTurn, 0)});
  double rate = 0;
  const std::vector<tl::Row> rows = tl::to_rows(raw, blocks, 1.0, &rate);
  // Expected: times from the first event (cycle 300), in ns at 1.5 cycles per ns.
  struct Want {
    int warpgroup;
    uint32_t phase;
    double start, end;
  };
  const Want want[] = {{0, tl::kQK, 0.0, 1000.0},
                       {0, tl::kSoftmax, 1000.0, 2000.0},
                       {1, tl::kWaitTurn, 800.0, 1800.0}};
  int failures = std::fabs(rate - ghz) < 1e-3 ? 0 : 1;
  if (rows.size() != 3) ++failures;
  for (size_t i = 0; i < rows.size() && i < 3; ++i) {
    const tl::Row& r = rows[i];
    if (r.warpgroup != want[i].warpgroup || r.phase != want[i].phase || r.sm != 7 ||
        std::fabs(r.t_start_ns - want[i].start) > 1.0 ||
        std::fabs(r.t_end_ns - want[i].end) > 1.0) {
      std::printf("  row %zu: warpgroup %d phase %u sm %u, %.1f-%.1f ns (expected %.1f-%.1f)\n", i,
                  r.warpgroup, r.phase, r.sm, r.t_start_ns, r.t_end_ns, want[i].start, want[i].end);
      ++failures;
    }
  }
  // Which blocks are written: block 0 and the block beside it on its SM, not the one on another
  // SM nor the one that came to the same SM later.
  const std::vector<tl::Row> spans = {{0, 0, tl::kQK, 0, 1, 1000.0, 2000.0},
                                      {1, 0, tl::kQK, 0, 2, 1000.0, 2000.0},
                                      {2, 0, tl::kQK, 0, 1, 1500.0, 2500.0},
                                      {3, 0, tl::kQK, 0, 1, 3000.0, 4000.0}};
  const std::vector<tl::Row> kept = tl::keep_coresident(spans, 1);
  if (kept.size() != 2 || kept[0].block != 0 || kept[1].block != 2 || kept[0].t_start_ns != 0.0)
    ++failures;
  std::printf(
      "CPU check of the cycle-to-ns conversion (a wrap of the 32-bit clock) and of the blocks "
      "kept: %s\n",
      failures == 0 ? "ok" : "FAILED");
  return failures;
}

std::string today_utc() {
  const std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", std::gmtime(&now));
  return buf;
}

float elapsed_ms(const AttentionFwdKernel& k, const fa::AttentionFwdArgs& args) {
  cudaEvent_t a, b;
  FA_CUDA_CHECK(cudaEventCreate(&a));
  FA_CUDA_CHECK(cudaEventCreate(&b));
  FA_CUDA_CHECK(cudaEventRecord(a));
  k.run(args, nullptr);
  FA_CUDA_CHECK(cudaEventRecord(b));
  FA_CUDA_CHECK(cudaEventSynchronize(b));
  float ms = 0;
  FA_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  FA_CUDA_CHECK(cudaEventDestroy(a));
  FA_CUDA_CHECK(cudaEventDestroy(b));
  return ms;
}

int run(int argc, char** argv) {
  fa::Cli cli("ch07_timeline",
              "Chapter 07's measured timeline: the forward rungs v1-v4 with phase timestamps, "
              "one CSV row per phase of each warpgroup of the first few thread blocks.");
  using Cli = fa::Cli;
  cli.option("out", Cli::Text, "ch07_timeline.csv", "the CSV to write")
      .option("seq", Cli::Int, "8192", "N (seq_q = seq_k); B = 16384 / N, H = 2048 / D")
      .at_least(1)
      .option("head_dim", Cli::Int, "128", "D: 64, 128 or 256")
      .option("blocks", Cli::Int, "4",
              "blocks written: 0 .. blocks-1, and those sharing an SM with them")
      .at_least(1)
      .option("pool", Cli::Int, "512", "blocks recorded (blockIdx.x < pool): more than one wave")
      .at_least(1)
      .option("warmup", Cli::Int, "3", "unrecorded launches of each rung before the recorded one")
      .at_least(0)
      .option("kernel", Cli::TextList, "all",
              "the rungs, comma-separated (default: 07/v1 to 07/v4)")
      .example("--head_dim=64 --out=ch07_timeline_d64.csv");
  std::vector<std::string> args(argv + 1, argv + argc);
  if (!cli.parse(args)) return cli.exit_code();
  const int64_t seq = cli.get_int("seq"), head_dim = cli.get_int("head_dim");
  const int64_t blocks = cli.get_int("blocks");
  const int pool = int(std::min<int64_t>(std::max(cli.get_int("pool"), blocks), 4096));
  const int64_t warmup = cli.get_int("warmup");
  if (head_dim != 64 && head_dim != 128 && head_dim != 256)
    throw fa::UsageError("--head_dim: 64, 128 or 256");
  std::vector<std::string> names(std::begin(kRungs), std::end(kRungs));
  if (cli.get("kernel") != "all") names = cli.get_list("kernel");

  int failures = check_conversion();
  if (!fa::have_gpu()) {
    std::printf("no GPU (%s): nothing recorded\n", fa::gpu_info().why_absent.c_str());
    return failures ? 1 : 0;
  }

  const fa::GpuInfo& gpu = fa::gpu_info();
  fa::AttentionShape shape;
  shape.batch = std::max<int64_t>(1, 16384 / seq);
  shape.heads = std::max<int64_t>(1, 2048 / head_dim);
  shape.seq_q = shape.seq_k = seq;
  shape.head_dim = head_dim;
  const DType dtype = DType::BF16;
  const int64_t n = shape.q_numel();
  fa::DeviceBuffer q(size_t(n) * 2), k(size_t(n) * 2), v(size_t(n) * 2), o(size_t(n) * 2),
      lse(size_t(shape.lse_numel()) * 4);
  fa::fill_random_device(dtype, q.data(), n, cli.seed(), 0.0f, 1.0f);
  fa::fill_random_device(dtype, k.data(), n, cli.seed() + 1, 0.0f, 1.0f);
  fa::fill_random_device(dtype, v.data(), n, cli.seed() + 2, 0.0f, 1.0f);
  fa::AttentionFwdArgs a;
  a.q = q.data();
  a.k = k.data();
  a.v = v.data();
  a.o = o.data();
  a.lse = lse.as<float>();
  a.shape = shape;
  a.dtype = dtype;

  const size_t slots = size_t(pool) * tl::kMaxWarpgroups * tl::kSlotEvents;
  fa::DeviceBuffer events(slots * sizeof(tl::Event));
  std::vector<tl::Event> raw(slots);
  std::vector<float> o_first;  // the first rung's O, which the others are compared with
  std::vector<std::string> notes;
  std::vector<std::pair<std::string, tl::Row>> all_rows;
  const double fallback_ghz = gpu.clock_khz / 1e6;

  for (const std::string& name : names) {
    const AttentionFwdKernel* kern = fa::find_entry<AttentionFwdKernel>(name);
    if (kern == nullptr) throw fa::UsageError("--kernel: no kernel " + name + " in this build");
    tl::host_buffer() = tl::Buffer{};  // warm-up and the unrecorded timing: no block records
    for (int64_t i = 0; i < warmup; ++i) kern->run(a, nullptr);
    FA_CUDA_CHECK(cudaDeviceSynchronize());
    const float ms_off = elapsed_ms(*kern, a);
    events.zero();
    tl::host_buffer() = tl::Buffer{events.as<tl::Event>(), pool};
    const float ms_on = elapsed_ms(*kern, a);
    tl::host_buffer() = tl::Buffer{};
    events.download(raw.data(), slots * sizeof(tl::Event));

    // The answer: finite, and v1's up to rounding (bf16 outputs of the same sums in other orders).
    const std::vector<float> out = fa::to_host(dtype, o, size_t(n));
    double max_diff = 0;
    bool finite = true;
    for (size_t i = 0; i < out.size(); ++i) {
      finite = finite && std::isfinite(out[i]);
      if (!o_first.empty()) max_diff = std::max(max_diff, double(std::fabs(out[i] - o_first[i])));
    }
    if (o_first.empty()) o_first = out;
    const bool ok = finite && max_diff < 0.03;
    failures += ok ? 0 : 1;

    double rate = 0;
    const std::vector<tl::Row> rows =
        tl::keep_coresident(tl::to_rows(raw, pool, fallback_ghz, &rate), blocks);
    int overflow = 0;
    for (int b = 0; b < pool; ++b)
      for (int w = 0; w < tl::kMaxWarpgroups; ++w)
        overflow += tl::slot_header(raw, b, w).count > uint32_t(tl::kCapacity) ? 1 : 0;
    failures += rows.empty() || overflow > 0 ? 1 : 0;
    char line[512];
    std::snprintf(line, sizeof line,
                  "%s: %.3f ms recording, %.3f ms not recording (this build), %zu events, %.3f "
                  "cycles/ns, O %s (max |O - O(%s)| = %.4f)%s",
                  name.c_str(), ms_on, ms_off, rows.size(), rate, ok ? "checked" : "WRONG",
                  names.front().c_str(), max_diff,
                  overflow ? ", SLOTS OVERFLOWED (raise kCapacity)" : "");
    std::printf("%s\n", line);
    notes.push_back(line);

    // Per phase: how many, and the median length, over the blocks written.
    std::map<uint32_t, std::vector<double>> lengths;
    for (const tl::Row& r : rows) lengths[r.phase].push_back(r.t_end_ns - r.t_start_ns);
    for (auto& [phase, len] : lengths) {
      std::sort(len.begin(), len.end());
      std::printf("    %-14s %6zu events, median %8.1f ns\n", tl::phase_name(phase), len.size(),
                  len[len.size() / 2]);
    }
    for (const tl::Row& r : rows) all_rows.emplace_back(name, r);
  }

  std::ofstream csv(cli.get("out"));
  if (!csv) throw fa::UsageError("--out: cannot write " + cli.get("out"));
  csv << "# ch07_timeline: " << gpu.name << ", " << today_utc() << ", bf16 D " << head_dim << " N "
      << seq << " B " << shape.batch << " H " << shape.heads << ", not causal, blocks 0-"
      << blocks - 1 << " and those sharing an SM with them\n";
  for (const std::string& line : notes) csv << "# " << line << "\n";
  csv << "kernel,block,warpgroup,phase,t_start_ns,t_end_ns,tile,sm\n";
  char buf[256];
  for (const auto& [name, r] : all_rows) {
    std::snprintf(buf, sizeof buf, "%s,%lld,%d,%s,%.1f,%.1f,%u,%u\n", name.c_str(),
                  (long long)r.block, r.warpgroup, tl::phase_name(r.phase), r.t_start_ns,
                  r.t_end_ns, r.tile, r.sm);
    csv << buf;
  }
  std::printf("wrote %s (%zu rows)%s\n", cli.get("out").c_str(), all_rows.size(),
              failures ? "; FAILURES above" : "");
  return failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const fa::UsageError& e) {
    std::cerr << "ch07_timeline: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "ch07_timeline: " << e.what() << "\n";
    return 1;
  }
}
