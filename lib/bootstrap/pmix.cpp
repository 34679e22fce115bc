// PMIx bootstrap (srun --mpi=pmix, Open MPI's mpirun, any PMIx launcher): rank and size
// from the launcher's job data, allgather as Put + Commit + Fence(collect) + Get per rank.
//
// Liveness belongs to the launcher here: when a rank dies, srun / mpirun end the job (and
// its fence), so no pcoll timeout is put on the fence; a slow rank is waited for.
#include <pmix.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include <bootstrap/bootstrap.hpp>
#include <support/error.hpp>
#include <support/log.hpp>

namespace pcoll::bootstrap {
namespace {

std::string pmix_message(const std::string& call, pmix_status_t rc) {
  return call + " failed: " + PMIx_Error_string(rc) + " (" + std::to_string(rc) + ")";
}

struct ValueDeleter {
  void operator()(pmix_value_t* v) const noexcept { PMIX_VALUE_RELEASE(v); }
};
using ValuePtr = std::unique_ptr<pmix_value_t, ValueDeleter>;

class PmixBootstrap final : public Bootstrap {
 public:
  PmixBootstrap() {
    std::memset(&self_, 0, sizeof self_);
    if (const pmix_status_t rc = PMIx_Init(&self_, nullptr, 0); rc != PMIX_SUCCESS)
      fail(Errc::bootstrap, pmix_message("PMIx_Init", rc) +
                                ": no PMIx server of a launcher can be reached (run under srun "
                                "--mpi=pmix or mpirun; PMIX_NAMESPACE or PCOLL_BOOTSTRAP=pmix chose PMIx)");
    rank_ = static_cast<int>(self_.rank);
    std::memset(&job_, 0, sizeof job_);
    std::strncpy(job_.nspace, self_.nspace, PMIX_MAX_NSLEN);
    job_.rank = PMIX_RANK_WILDCARD;
    try {
      ValuePtr value = get(job_, PMIX_JOB_SIZE);
      if (value->type != PMIX_UINT32)
        fail(Errc::bootstrap, "PMIx job size has PMIx type " + std::to_string(value->type) + ", expected uint32");
      size_ = static_cast<int>(value->data.uint32);
      if (size_ < 1 || rank_ >= size_)
        fail(Errc::bootstrap, "PMIx gave rank " + std::to_string(rank_) + " of a job of " + std::to_string(size_));
    } catch (...) {
      PMIx_Finalize(nullptr, 0);
      throw;
    }
    log::debug("pmix: rank " + std::to_string(rank_) + " of " + std::to_string(size_) +
               " in namespace " + self_.nspace);
  }

  ~PmixBootstrap() override { PMIx_Finalize(nullptr, 0); }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "pmix"; }

  std::vector<Blob> allgather(std::span<const std::byte> mine) override {
    // A key per call: PMIx keeps every put for the job's lifetime, and a reused key would
    // return either call's value.
    const std::string key = "pcoll.ag." + std::to_string(sequence_++);
    // A marker byte in front: PMIx byte objects of length 0 come back as no data at all.
    Blob framed(mine.size() + 1);
    framed[0] = std::byte{1};
    if (!mine.empty()) std::memcpy(framed.data() + 1, mine.data(), mine.size());

    pmix_value_t value;
    std::memset(&value, 0, sizeof value);
    value.type = PMIX_BYTE_OBJECT;
    value.data.bo.bytes = reinterpret_cast<char*>(framed.data());
    value.data.bo.size = framed.size();
    if (const pmix_status_t rc = PMIx_Put(PMIX_GLOBAL, key.c_str(), &value); rc != PMIX_SUCCESS)
      fail(Errc::bootstrap, pmix_message("PMIx_Put(" + key + ")", rc));
    if (const pmix_status_t rc = PMIx_Commit(); rc != PMIX_SUCCESS)
      fail(Errc::bootstrap, pmix_message("PMIx_Commit", rc));
    fence(true);

    std::vector<Blob> all(static_cast<size_t>(size_));
    for (int r = 0; r < size_; ++r) {
      pmix_proc_t peer = job_;
      peer.rank = static_cast<pmix_rank_t>(r);
      ValuePtr got = get(peer, key.c_str());
      if (got->type != PMIX_BYTE_OBJECT || got->data.bo.size < 1 || got->data.bo.bytes == nullptr)
        fail(Errc::protocol, "PMIx value " + key + " of rank " + std::to_string(r) + " is not a pcoll blob");
      const auto* bytes = reinterpret_cast<const std::byte*>(got->data.bo.bytes);
      all[static_cast<size_t>(r)].assign(bytes + 1, bytes + got->data.bo.size);
    }
    return all;
  }

  void barrier() override { fence(false); }

 private:
  void fence(bool collect) {
    pmix_info_t info;
    std::memset(&info, 0, sizeof info);
    bool flag = collect;
    size_t ninfo = 0;
    if (collect) {
      if (const pmix_status_t rc = PMIx_Info_load(&info, PMIX_COLLECT_DATA, &flag, PMIX_BOOL); rc != PMIX_SUCCESS)
        fail(Errc::bootstrap, pmix_message("PMIx_Info_load(PMIX_COLLECT_DATA)", rc));
      ninfo = 1;
    }
    const pmix_status_t rc = PMIx_Fence(&job_, 1, ninfo ? &info : nullptr, ninfo);
    if (ninfo) PMIX_INFO_DESTRUCT(&info);
    if (rc != PMIX_SUCCESS)
      fail(Errc::bootstrap, pmix_message("PMIx_Fence", rc) + " (did another rank exit early?)");
  }

  static ValuePtr get(const pmix_proc_t& proc, const char* key) {
    pmix_value_t* raw = nullptr;
    const pmix_status_t rc = PMIx_Get(&proc, key, nullptr, 0, &raw);
    ValuePtr value(raw);
    if (rc != PMIX_SUCCESS || !value)
      fail(Errc::bootstrap, pmix_message(std::string("PMIx_Get(") + key + ") of " + proc.nspace +
                                             (proc.rank == PMIX_RANK_WILDCARD ? std::string(" (job)") : " rank " + std::to_string(proc.rank)),
                                         rc));
    return value;
  }

  pmix_proc_t self_;
  pmix_proc_t job_;  // this job's namespace, wildcard rank
  int rank_ = 0;
  int size_ = 1;
  uint64_t sequence_ = 0;
};

}  // namespace

std::unique_ptr<Bootstrap> make_pmix() { return std::make_unique<PmixBootstrap>(); }

}  // namespace pcoll::bootstrap
