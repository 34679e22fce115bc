// Ranks as threads (thread_ranks.hpp): the in-process bootstrap handed to the C API as the
// callbacks of include/pcoll/private.h, one thread per rank.
#include "thread_ranks.hpp"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <bootstrap/bootstrap.hpp>
#include <bootstrap/inproc_store.hpp>
#include <pcoll/private.h>
#include <support/error.hpp>
#include <support/support_settings.hpp>

namespace thread_ranks {
namespace {

using pcoll::bootstrap::Bootstrap;

int report(const pcoll::Error& error, char* message, size_t message_bytes) {
  std::snprintf(message, message_bytes, "%s", error.what());
  return static_cast<int>(error.code());
}

int c_allgather(void* context, const void* mine, size_t bytes, size_t* sizes, void** data, char* error,
                size_t error_bytes) {
  try {
    const auto blobs = static_cast<Bootstrap*>(context)->allgather({static_cast<const std::byte*>(mine), bytes});
    size_t total = 0;
    for (size_t r = 0; r < blobs.size(); ++r) total += sizes[r] = blobs[r].size();
    auto* out = static_cast<std::byte*>(std::malloc(std::max<size_t>(total, 1)));
    if (out == nullptr) return report(pcoll::Error(pcoll::Errc::out_of_memory, "out of memory"), error, error_bytes);
    size_t at = 0;
    for (const auto& blob : blobs) {
      if (!blob.empty()) std::memcpy(out + at, blob.data(), blob.size());
      at += blob.size();
    }
    *data = out;
    return PCOLL_SUCCESS;
  } catch (const pcoll::Error& e) {
    return report(e, error, error_bytes);
  }
}

int c_barrier(void* context, char* error, size_t error_bytes) {
  try {
    static_cast<Bootstrap*>(context)->barrier();
    return PCOLL_SUCCESS;
  } catch (const pcoll::Error& e) {
    return report(e, error, error_bytes);
  }
}

void c_destroy(void* context) { std::unique_ptr<Bootstrap> owned(static_cast<Bootstrap*>(context)); }

[[noreturn]] void end_job(int rank, int size, const std::string& why) {
  std::fprintf(stderr, "thread_ranks: rank %d of %d failed (%s); ending the job, since its peers would wait for it\n",
               rank, size, why.c_str());
  std::fflush(nullptr);
  std::_Exit(1);
}

void rank_main(const std::shared_ptr<pcoll::bootstrap::InprocStore>& store, int rank,
               const std::function<void(pcoll_comm_t*)>& body) {
  const int size = store->size();
  pcoll_private_bootstrap_t callbacks{};
  callbacks.rank = rank;
  callbacks.size = size;
  callbacks.name = "inproc";
  callbacks.context = pcoll::bootstrap::make_inproc(store, rank).release();  // owned by the communicator
  callbacks.allgather = c_allgather;
  callbacks.barrier = c_barrier;
  callbacks.destroy = c_destroy;
  pcoll_comm_t* comm = nullptr;
  if (pcoll_private_init_with_bootstrap(&callbacks, &comm) != PCOLL_SUCCESS) end_job(rank, size, pcoll_last_error());
  try {
    body(comm);
  } catch (const std::exception& e) {
    end_job(rank, size, e.what());
  } catch (...) {
    end_job(rank, size, "a REQUIRE failed");
  }
  if (pcoll_finalize(comm) != PCOLL_SUCCESS) end_job(rank, size, pcoll_last_error());
}

}  // namespace

void use_inproc_provider() {
  const char* chosen = std::getenv("PCOLL_PROVIDER");
  if (chosen == nullptr || *chosen == '\0') ::setenv("PCOLL_PROVIDER", "inproc", 1);
}

void run(int size, const std::function<void(pcoll_comm_t* comm)>& body) {
  const std::chrono::milliseconds timeout(pcoll::SupportSettings::get_unsigned("PCOLL_TIMEOUT_MS"));
  const auto store = std::make_shared<pcoll::bootstrap::InprocStore>(size, timeout);
  std::vector<std::thread> ranks;
  ranks.reserve(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r)
    ranks.emplace_back([&store, &body, r] {
      // "rank 3" in a debugger's thread list and in top.
      ::pthread_setname_np(::pthread_self(), ("rank " + std::to_string(r)).c_str());
      rank_main(store, r, body);
    });
  for (auto& thread : ranks) thread.join();
}

}  // namespace thread_ranks
