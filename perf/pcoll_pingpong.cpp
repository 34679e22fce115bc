// pcoll_pingpong: two-rank latency/bandwidth of the transport interface, in the style of
// fabtests' fi_pingpong, so the two can be compared line by line:
//
//   pcollrun -n 2 pcoll_pingpong [-o write_notify|write|fetch_add|compare_swap]
//                                [-S size|all] [-I iters] [-w warmup] [-c] [--json] [-p sel]
//
// Columns and definitions follow fi_pingpong: usec/xfer is half a round trip, MB/sec counts
// the bytes of both directions (10^6 bytes per second), Mxfers/sec counts both directions.
// For the atomics a transfer is one blocking 8-byte operation (itself a round trip), issued
// by rank 0 while rank 1 only progresses.
//
// --bw streams instead, like fi_rma_bw or ucx_perftest's *_bw tests: rank 0 posts a window
// of -W transfers back to back and rank 1 answers each window with one notification once it
// holds them all (write_notify: all their notifications; write: a notify after a flush).
// MB/sec then counts one direction, and usec/xfer is the time per transfer.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <bootstrap/bootstrap.hpp>
#include <support/error.hpp>
#include "perf_job.hpp"
#include <registry/registry.hpp>
#include <support/support_settings.hpp>
#include <transport/progress_driver.hpp>
#include <transport/rendezvous.hpp>
#include <transport/transport.hpp>

namespace {

using Clock = std::chrono::steady_clock;
namespace tp = pcoll::transport;

constexpr const char* kTool = "pcoll_pingpong";
constexpr size_t kMaxSizeBytes = size_t{1} << 30;
constexpr size_t kAllMaxBytes = size_t{16} << 20;

const char kUsage[] =
    "usage: pcollrun -n 2 pcoll_pingpong [options]\n"
    "  -o OP        write_notify (default), write, fetch_add, compare_swap\n"
    "  -S SIZE      bytes per transfer, K/M suffixes allowed, or 'all' (1 B .. 16 MiB); default 64\n"
    "  -I ITERS     timed iterations per size (default 1000; 100 for sizes >= 1 MiB under -S all)\n"
    "  -w WARMUP    untimed iterations first (default 100; 10 for sizes >= 1 MiB under -S all)\n"
    "  -c           fill and verify every byte of every transfer\n"
    "  --bw         stream windows of transfers from rank 0 to rank 1 (write_notify, write)\n"
    "  -W WINDOW    transfers per window under --bw (default 64)\n"
    "  -p SELECTOR  transport (default PCOLL_PROVIDER, else ucx:shm or ofi:shm)\n"
    "  --json       one JSON object per size instead of the table\n"
    "  -h, --help   this help\n";

[[noreturn]] void usage_error(const std::string& message) { pcoll::perf::usage_error(kTool, message, kUsage); }

enum class Op { write_notify, write, fetch_add, compare_swap };

const char* op_name(Op op) {
  switch (op) {
    case Op::write_notify: return "write_notify";
    case Op::write: return "write";
    case Op::fetch_add: return "fetch_add";
    case Op::compare_swap: return "compare_swap";
  }
  return "?";
}

bool is_atomic(Op op) { return op == Op::fetch_add || op == Op::compare_swap; }

struct Options {
  Op op = Op::write_notify;
  std::vector<size_t> sizes{64};
  bool all_sizes = false;
  std::optional<uint64_t> iters;
  std::optional<uint64_t> warmup;
  bool verify = false;
  bool json = false;
  bool bandwidth = false;
  uint64_t window = 64;
  std::string selector;  // "" = PCOLL_PROVIDER / default
};

uint64_t parse_count(const std::string& text, const char* flag, uint64_t min) {
  return pcoll::perf::parse_uint(kTool, kUsage, text, flag, min, uint64_t{1} << 32);
}

Options parse_options(int argc, char** argv) {
  Options o;
  bool size_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage_error(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "-h" || arg == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (arg == "-o") {
      const std::string v = value();
      if (v == "write_notify") o.op = Op::write_notify;
      else if (v == "write") o.op = Op::write;
      else if (v == "fetch_add") o.op = Op::fetch_add;
      else if (v == "compare_swap") o.op = Op::compare_swap;
      else usage_error("-o '" + v + "' is not one of write_notify, write, fetch_add, compare_swap");
    } else if (arg == "-S") {
      const std::string v = value();
      size_given = true;
      o.sizes.clear();
      if (v == "all") {
        o.all_sizes = true;
        for (size_t s = 1; s <= kAllMaxBytes; s *= 2) o.sizes.push_back(s);
      } else {
        o.sizes.push_back(pcoll::perf::parse_bytes(kTool, kUsage, v, "-S", 1, kMaxSizeBytes));
      }
    } else if (arg == "-I") {
      o.iters = parse_count(value(), "-I", 1);
    } else if (arg == "-w") {
      o.warmup = parse_count(value(), "-w", 0);
    } else if (arg == "-c") {
      o.verify = true;
    } else if (arg == "--bw") {
      o.bandwidth = true;
    } else if (arg == "-W") {
      o.window = parse_count(value(), "-W", 1);
    } else if (arg == "-p") {
      o.selector = value();
    } else if (arg == "--json") {
      o.json = true;
    } else {
      usage_error("unknown option '" + arg + "'");
    }
  }
  if (is_atomic(o.op)) {
    if (size_given && !(o.sizes.size() == 1 && o.sizes[0] == 8))
      usage_error(std::string("-o ") + op_name(o.op) + " works on 8-byte words; -S must be 8 or left out");
    o.sizes = {8};
    if (o.bandwidth) usage_error(std::string("--bw streams writes; -o ") + op_name(o.op) + " is a blocking round trip");
  }
  return o;
}

// fi_pingpong's compact numbers: sizes in binary k/m/g, counts in decimal k/m/b, with one
// decimal below 10.
std::string compact(uint64_t value, uint64_t unit, const char* suffixes) {
  uint64_t base = 1;
  char mag = '\0';
  for (int i = 2; i >= 0; --i) {
    uint64_t b = 1;
    for (int k = 0; k <= i; ++k) b *= unit;
    if (value >= b) {
      base = b;
      mag = suffixes[i];
      break;
    }
  }
  const uint64_t whole = value / base;
  const uint64_t tenth = whole < 10 ? (value % base) * 10 / base : 0;
  std::string out = std::to_string(whole);
  if (tenth != 0) out.append(1, '.').append(std::to_string(tenth));  // append: g++ 12 -Wrestrict
  if (mag != '\0') out.append(1, mag);
  return out;
}
std::string size_text(uint64_t bytes) { return compact(bytes, 1024, "kmg"); }
std::string count_text(uint64_t count) { return compact(count, 1000, "kmb"); }

std::byte pattern(uint64_t iter, size_t i) {
  return static_cast<std::byte>((iter * 131 + i * 7 + 1) & 0xff);
}
// The last byte of transfer `iter` in write mode: never 0 (fresh buffers) and never equal
// to the previous iteration's.
std::byte flag_of(uint64_t iter) { return static_cast<std::byte>(1 + iter % 251); }

struct Result {
  size_t bytes;
  uint64_t iters;
  uint64_t warmup;
  double seconds;
  int xfers_per_iter;
};

class PingPong {
 public:
  PingPong(const Options& o, pcoll::bootstrap::Bootstrap& boot) : o_(o), boot_(boot) {
    tp::Options topts;
    topts.timeout = std::chrono::milliseconds(pcoll::SupportSettings::get_unsigned("PCOLL_TIMEOUT_MS"));
    timeout_ = topts.timeout;
    transport_ = pcoll::providers::create(o.selector, topts);
    tp::connect_all(*transport_, boot.rank(),
                    [&boot](std::span<const std::byte> mine) { return boot.allgather(mine); });
    peer_ = 1 - boot.rank();

    const size_t max_bytes = *std::max_element(o.sizes.begin(), o.sizes.end());
    source_ = transport_->allocate(max_bytes);
    landing_ = transport_->allocate(std::max<size_t>(max_bytes, 8));
    const auto keys = boot.allgather(landing_->remote_key());
    peer_landing_ = transport_->import_region(peer_, keys[static_cast<size_t>(peer_)]);
    notify_mask_ = transport_->capabilities().notify_bits >= 64
                       ? ~uint64_t{0}
                       : (uint64_t{1} << transport_->capabilities().notify_bits) - 1;
  }

  const tp::Capabilities& capabilities() const { return transport_->capabilities(); }

  Result run_size(size_t bytes) {
    const bool big = o_.all_sizes && bytes >= (size_t{1} << 20);
    const uint64_t iters = o_.iters.value_or(big ? 100 : 1000);
    const uint64_t warmup = o_.warmup.value_or(big ? 10 : 100);
    // Fresh landing buffer per size so no earlier byte looks like this size's flag.
    std::memset(landing_->bytes().data(), 0, landing_->bytes().size());
    boot_.barrier();
    Result r{bytes, iters, warmup, 0.0, 2};
    if (is_atomic(o_.op)) {
      r.xfers_per_iter = 1;
      r.seconds = run_atomic(iters, warmup);
    } else if (o_.bandwidth) {
      // Iterations count transfers here, rounded up to whole windows.
      r.xfers_per_iter = static_cast<int>(o_.window);
      r.iters = (iters + o_.window - 1) / o_.window;
      r.warmup = (warmup + o_.window - 1) / o_.window;
      r.seconds = run_stream(bytes, r.iters, r.warmup);
    } else {
      r.seconds = run_transfer(bytes, iters, warmup);
    }
    {
      // A peer's flush may need us to progress (UCX tcp acknowledges flushes) while we sit
      // in the bootstrap barrier, which does not drive the transport.
      tp::ProgressDriver driver(*transport_);
      transport_->flush();
      boot_.barrier();
    }
    return r;
  }

 private:
  [[noreturn]] void fail_check(const std::string& what) {
    pcoll::fail(pcoll::Errc::internal, "data check failed: " + what);
  }

  // Spins (with progress) until `done()`; a silent peer is an error, not a hang. The clock
  // is first read after 4096 polls, not on entry: two clock reads per wait were 6% of an
  // 8-byte shared-memory round trip, a cost of the tool and not of the transport.
  template <class Done>
  void spin_until(Done done, const char* what) {
    std::optional<Clock::time_point> deadline;
    for (uint32_t spins = 1;; ++spins) {
      if (done()) return;
      if ((spins & 0xfff) != 0) continue;
      const auto now = Clock::now();
      if (!deadline) {
        deadline = now + timeout_;
      } else if (now > *deadline) {
        pcoll::fail(pcoll::Errc::timeout, std::string("rank ") + std::to_string(peer_) + " sent no " + what +
                                              " within " + std::to_string(timeout_.count()) + " ms");
      }
    }
  }

  void wait_notification(uint64_t expected) {
    uint64_t value = 0;
    spin_until([&] { return transport_->poll({&value, 1}) == 1; }, "notification");
    if (o_.verify && value != (expected & notify_mask_))
      fail_check("notification " + std::to_string(value) + ", expected " + std::to_string(expected & notify_mask_));
  }

  void wait_flag(size_t bytes, uint64_t iter) {
    std::atomic_ref<std::byte> last(landing_->bytes()[bytes - 1]);
    const std::byte want = o_.verify ? pattern(iter, bytes - 1) : flag_of(iter);
    spin_until([&] {
      if (last.load(std::memory_order_acquire) == want) return true;
      transport_->progress();  // providers like tcp place incoming writes only when we poll
      return false;
    }, "write");
  }

  void fill_source(size_t bytes, uint64_t iter) {
    auto src = source_->bytes();
    if (o_.verify) {
      transport_->flush();  // the previous transfer may still read the source
      // pattern() changes every byte between consecutive iterations (131 is odd).
      for (size_t i = 0; i < bytes; ++i) src[i] = pattern(iter, i);
    } else if (o_.op == Op::write) {
      // The peer saw this byte of the previous transfer, so it has been read already.
      src[bytes - 1] = flag_of(iter);
    }
  }

  void check_landing(size_t bytes, uint64_t iter) {
    if (!o_.verify) return;
    const auto land = landing_->bytes();
    if (o_.op == Op::write) {
      // A write's bytes need not land in order: the last byte may come first.
      spin_until([&] {
        for (size_t i = 0; i < bytes; ++i)
          if (std::atomic_ref<std::byte>(land[i]).load(std::memory_order_acquire) != pattern(iter, i)) {
            transport_->progress();
            return false;
          }
        return true;
      }, "complete write");
      return;
    }
    for (size_t i = 0; i < bytes; ++i)
      if (land[i] != pattern(iter, i))
        fail_check("byte " + std::to_string(i) + " of " + std::to_string(bytes) + " in iteration " +
                   std::to_string(iter));
  }

  void send(size_t bytes, uint64_t iter) {
    fill_source(bytes, iter);
    if (o_.op == Op::write_notify)
      transport_->write_notify(*source_, 0, *peer_landing_, 0, bytes, iter);
    else
      transport_->write(*source_, 0, *peer_landing_, 0, bytes);
  }

  void receive(size_t bytes, uint64_t iter) {
    if (o_.op == Op::write_notify) wait_notification(iter);
    else wait_flag(bytes, iter);
    check_landing(bytes, iter);
  }

  double run_transfer(size_t bytes, uint64_t iters, uint64_t warmup) {
    const bool pinger = boot_.rank() == 0;
    Clock::time_point start = Clock::now();
    for (uint64_t i = 0; i < warmup + iters; ++i) {
      if (i == warmup) start = Clock::now();
      const uint64_t iter = ++sequence_;  // unique over the whole run: fresh flags per size
      if (pinger) {
        send(bytes, iter);
        receive(bytes, iter);
      } else {
        receive(bytes, iter);
        send(bytes, iter);
      }
    }
    return std::chrono::duration<double>(Clock::now() - start).count();
  }

  // --bw: rank 0 posts windows of transfers, rank 1 acknowledges each whole window.
  double run_stream(size_t bytes, uint64_t windows, uint64_t warmup) {
    const uint64_t first = sequence_ + 1;
    if (o_.verify) {
      auto src = source_->bytes();
      for (size_t i = 0; i < bytes; ++i) src[i] = pattern(first, i);
    }
    Clock::time_point start = Clock::now();
    for (uint64_t w = 0; w < warmup + windows; ++w) {
      if (w == warmup) start = Clock::now();
      if (boot_.rank() == 0) {
        for (uint64_t k = 0; k < o_.window; ++k) {
          const uint64_t iter = ++sequence_;
          if (o_.op == Op::write_notify)
            transport_->write_notify(*source_, 0, *peer_landing_, 0, bytes, iter);
          else
            transport_->write(*source_, 0, *peer_landing_, 0, bytes);
        }
        if (o_.op == Op::write) {
          transport_->flush();  // the window is visible at rank 1 before the notice
          transport_->notify(peer_, sequence_);
        }
        wait_notification(sequence_);
      } else {
        const uint64_t expected = o_.op == Op::write_notify ? o_.window : 1;
        for (uint64_t k = 0; k < expected; ++k) {
          uint64_t value = 0;
          spin_until([&] { return transport_->poll({&value, 1}) == 1; }, "window notification");
          const uint64_t low = (sequence_ + 1) & notify_mask_;
          const uint64_t high = (sequence_ + o_.window) & notify_mask_;
          if (o_.verify && low <= high && (value < low || value > high))
            fail_check("notification " + std::to_string(value) + " outside window " + std::to_string(low) + ".." +
                       std::to_string(high));
        }
        sequence_ += o_.window;
        transport_->notify(peer_, sequence_);
      }
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (o_.verify && boot_.rank() == 1) {
      const auto land = landing_->bytes();
      for (size_t i = 0; i < bytes; ++i)
        if (land[i] != pattern(first, i))
          fail_check("byte " + std::to_string(i) + " of " + std::to_string(bytes) + " after streaming");
    }
    return seconds;
  }

  // Rank 0 issues the atomics on rank 1's word; rank 1 progresses until rank 0 is done.
  double run_atomic(uint64_t iters, uint64_t warmup) {
    if (boot_.rank() != 0) {
      uint64_t value = 0;
      spin_until([&] { return transport_->poll({&value, 1}) == 1; }, "end-of-test notification");
      if (o_.verify) {
        uint64_t word = 0;
        std::memcpy(&word, landing_->bytes().data(), sizeof word);
        if (word != warmup + iters) fail_check("final word " + std::to_string(word));
      }
      return 0.0;
    }
    Clock::time_point start = Clock::now();
    for (uint64_t i = 0; i < warmup + iters; ++i) {
      if (i == warmup) start = Clock::now();
      const uint64_t old = o_.op == Op::fetch_add ? transport_->fetch_add(*peer_landing_, 0, 1)
                                                  : transport_->compare_swap(*peer_landing_, 0, i, i + 1);
      if (o_.verify && old != i) fail_check("atomic returned " + std::to_string(old) + ", expected " + std::to_string(i));
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    transport_->notify(peer_, 1);
    return seconds;
  }

  const Options& o_;
  pcoll::bootstrap::Bootstrap& boot_;
  std::chrono::milliseconds timeout_{30000};
  std::unique_ptr<tp::Transport> transport_;
  int peer_ = 1;
  std::unique_ptr<tp::LocalRegion> source_;
  std::unique_ptr<tp::LocalRegion> landing_;
  std::unique_ptr<tp::RemoteRegion> peer_landing_;
  uint64_t notify_mask_ = ~uint64_t{0};
  uint64_t sequence_ = 0;
};

void print_header() {
  std::printf("%-8s%-8s%-9s%-8s%8s%11s%13s%13s\n", "bytes", "#sent", "#ack", "total", "time", "MB/sec",
              "usec/xfer", "Mxfers/sec");
}

void print_row(const Result& r) {
  const double usec = r.seconds * 1e6;
  const double xfers = static_cast<double>(r.iters) * r.xfers_per_iter;
  const uint64_t total = r.iters * r.bytes * static_cast<uint64_t>(r.xfers_per_iter);
  std::printf("%-8s%-8s=%-8s%-8s%8.2fs%10.2f%11.2f%11.2f\n", size_text(r.bytes).c_str(),
              count_text(r.iters).c_str(), count_text(r.iters).c_str(), size_text(total).c_str(), r.seconds,
              static_cast<double>(total) / usec, usec / xfers, xfers / usec);
}

void print_json(const Result& r, const Options& o, const tp::Capabilities& caps) {
  const double usec = r.seconds * 1e6;
  const double xfers = static_cast<double>(r.iters) * r.xfers_per_iter;
  const uint64_t total = r.iters * r.bytes * static_cast<uint64_t>(r.xfers_per_iter);
  std::printf("{\"op\":\"%s\",\"mode\":\"%s\",\"window\":%d,\"provider\":\"%s\",\"fabric\":\"%s\",\"bytes\":%zu,"
              "\"iters\":%llu,\"warmup\":%llu,\"total_bytes\":%llu,\"time_s\":%.6f,\"usec_per_xfer\":%.3f,"
              "\"mb_per_sec\":%.3f,\"mxfers_per_sec\":%.4f,\"verified\":%s}\n",
              op_name(o.op), o.bandwidth ? "bandwidth" : "latency", o.bandwidth ? r.xfers_per_iter : 1,
              caps.name.c_str(), caps.provider.c_str(), r.bytes,
              static_cast<unsigned long long>(r.iters), static_cast<unsigned long long>(r.warmup),
              static_cast<unsigned long long>(total), r.seconds, usec / xfers,
              static_cast<double>(total) / usec, xfers / usec, o.verify ? "true" : "false");
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = parse_options(argc, argv);
  try {
    auto boot = pcoll::bootstrap::from_environment();
    if (boot->size() != 2) {
      std::fprintf(stderr, "pcoll_pingpong: needs exactly 2 ranks (got %d); run it as `pcollrun -n 2 pcoll_pingpong`\n",
                   boot->size());
      return pcoll::perf::kUsageExit;
    }
    PingPong pingpong(options, *boot);
    const bool reporter = boot->rank() == 0;
    if (reporter && !options.json) {
      const auto& caps = pingpong.capabilities();
      std::printf("# pcoll_pingpong op %s, provider %s (%s)%s%s\n", op_name(options.op), caps.name.c_str(),
                  caps.provider.c_str(), options.verify ? ", verifying every byte" : "",
                  options.bandwidth ? (", streaming windows of " + std::to_string(options.window)).c_str() : "");
      print_header();
    }
    for (size_t bytes : options.sizes) {
      const Result r = pingpong.run_size(bytes);
      if (!reporter) continue;
      if (options.json) print_json(r, options, pingpong.capabilities());
      else print_row(r);
      std::fflush(stdout);
    }
  } catch (const pcoll::Error& e) {
    std::fprintf(stderr, "pcoll_pingpong: %s\n", e.what());
    return 1;
  }
  return 0;
}
