// PMI2 bootstrap (srun --mpi=pmi2, MPICH's mpiexec.hydra): rank and size from PMI2_Init,
// allgather as KVS_Put + KVS_Fence + KVS_Get with one key per (call, rank, chunk).
//
// PMI2 values are NUL-terminated strings of at most PMI2_MAX_VALLEN bytes, so a blob is
// encoded in URL-safe base64 (no '=', ';' or spaces, which the wire protocols parse) and
// split into chunks; the first chunk's value starts with "<chunk count>.".
// As with PMIx, the launcher ends the job (and the fence) when a rank dies.
#include <slurm/pmi2.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include <bootstrap/bootstrap.hpp>
#include <support/error.hpp>
#include <support/log.hpp>

namespace pcoll::bootstrap {
namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
// Bytes per chunk: a multiple of 3 so that chunks encode independently (960 characters),
// well under PMI2_MAX_VALLEN with the count prefix.
constexpr size_t kChunkBytes = 720;
static_assert(kChunkBytes % 3 == 0 && kChunkBytes / 3 * 4 + 16 < PMI2_MAX_VALLEN);

std::string encode(std::span<const std::byte> bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    uint32_t group = 0;
    for (size_t k = 0; k < 3; ++k)
      group = (group << 8) | (k < n ? std::to_integer<uint32_t>(bytes[i + k]) : 0u);
    for (size_t k = 0; k < n + 1; ++k) out += kAlphabet[(group >> (18 - 6 * k)) & 63];
  }
  return out;
}

// Appends the bytes `text` encodes; false on a character outside the alphabet or a length
// no encoder produces.
bool decode(const std::string& text, Blob& out) {
  static const std::array<int, 256> table = [] {
    std::array<int, 256> t{};
    t.fill(-1);
    for (int i = 0; i < 64; ++i) t[static_cast<unsigned char>(kAlphabet[i])] = i;
    return t;
  }();
  if (text.size() % 4 == 1) return false;
  for (size_t i = 0; i < text.size(); i += 4) {
    const size_t n = std::min<size_t>(4, text.size() - i);
    uint32_t group = 0;
    for (size_t k = 0; k < 4; ++k) {
      int v = 0;
      if (k < n) {
        v = table[static_cast<unsigned char>(text[i + k])];
        if (v < 0) return false;
      }
      group = (group << 6) | static_cast<uint32_t>(v);
    }
    for (size_t k = 0; k + 1 < n; ++k) out.push_back(static_cast<std::byte>((group >> (16 - 8 * k)) & 0xff));
  }
  return true;
}

std::string pmi2_message(const std::string& call, int rc) {
  return call + " failed with PMI2 error " + std::to_string(rc);
}

class Pmi2Bootstrap final : public Bootstrap {
 public:
  Pmi2Bootstrap() {
    // PMI2_Init "succeeds" without a launcher too (as a singleton, and later calls fail
    // obscurely), so the server's descriptor is checked first.
    if (!std::getenv("PMI_FD") && !std::getenv("PMI_PORT"))
      fail(Errc::bootstrap, "PMI2 bootstrap requested, but neither PMI_FD nor PMI_PORT is set: no PMI2 "
                            "launcher (srun --mpi=pmi2, mpiexec.hydra) started this process");
    int spawned = 0, appnum = 0;
    if (const int rc = PMI2_Init(&spawned, &size_, &rank_, &appnum); rc != PMI2_SUCCESS)
      fail(Errc::bootstrap, pmi2_message("PMI2_Init", rc) +
                                ": the launcher's PMI2 server cannot be reached (run under srun "
                                "--mpi=pmi2 or mpiexec.hydra, or unset PMI_FD)");
    std::array<char, PMI2_MAX_VALLEN> id{};
    if (const int rc = PMI2_Job_GetId(id.data(), static_cast<int>(id.size())); rc != PMI2_SUCCESS) {
      PMI2_Finalize();
      fail(Errc::bootstrap, pmi2_message("PMI2_Job_GetId", rc));
    }
    job_id_ = id.data();
    if (size_ < 1 || rank_ < 0 || rank_ >= size_) {
      PMI2_Finalize();
      fail(Errc::bootstrap, "PMI2 gave rank " + std::to_string(rank_) + " of a job of " + std::to_string(size_));
    }
    log::debug("pmi2: rank " + std::to_string(rank_) + " of " + std::to_string(size_) + " in job " + job_id_);
  }

  ~Pmi2Bootstrap() override { PMI2_Finalize(); }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "pmi2"; }

  std::vector<Blob> allgather(std::span<const std::byte> mine) override {
    const uint64_t sequence = sequence_++;
    const size_t chunks = (mine.size() + kChunkBytes - 1) / kChunkBytes;
    for (size_t c = 0; c == 0 || c < chunks; ++c) {
      const size_t begin = std::min(c * kChunkBytes, mine.size());
      const size_t bytes = std::min(kChunkBytes, mine.size() - begin);
      std::string value = encode(mine.subspan(begin, bytes));
      if (c == 0) value = std::to_string(chunks) + "." + value;
      const std::string k = key(sequence, rank_, c);
      if (const int rc = PMI2_KVS_Put(k.c_str(), value.c_str()); rc != PMI2_SUCCESS)
        fail(Errc::bootstrap, pmi2_message("PMI2_KVS_Put(" + k + ")", rc));
    }
    fence();

    std::vector<Blob> all(static_cast<size_t>(size_));
    for (int r = 0; r < size_; ++r) {
      Blob& blob = all[static_cast<size_t>(r)];
      std::string first = get(sequence, r, 0);
      const size_t dot = first.find('.');
      size_t count = 0;
      try {
        count = dot == std::string::npos ? SIZE_MAX : std::stoull(first.substr(0, dot));
      } catch (const std::exception&) {
        count = SIZE_MAX;
      }
      if (count > (kMaxBlobBytes + kChunkBytes - 1) / kChunkBytes || !decode(first.substr(dot + 1), blob))
        fail(Errc::protocol, "PMI2 value " + key(sequence, r, 0) + " is not a pcoll blob");
      for (size_t c = 1; c < count; ++c)
        if (!decode(get(sequence, r, c), blob))
          fail(Errc::protocol, "PMI2 value " + key(sequence, r, c) + " is not a pcoll blob");
    }
    return all;
  }

  // A fence alone is not a barrier everywhere: under MPICH's hydra a KVS_Fence with nothing
  // put let ranks through while another was still two collective calls behind (seen as a
  // handle's memory freed before a slower rank had imported its key). A fence after a put,
  // and the get of every rank's key, synchronise: the barrier is an empty allgather.
  void barrier() override { allgather({}); }

 private:
  static constexpr size_t kMaxBlobBytes = size_t{64} << 20;

  static std::string key(uint64_t sequence, int rank, size_t chunk) {
    return "pcoll-" + std::to_string(sequence) + "-" + std::to_string(rank) + "-" + std::to_string(chunk);
  }

  void fence() {
    if (const int rc = PMI2_KVS_Fence(); rc != PMI2_SUCCESS)
      fail(Errc::bootstrap, pmi2_message("PMI2_KVS_Fence", rc) + " (did another rank exit early?)");
  }

  std::string get(uint64_t sequence, int rank, size_t chunk) const {
    const std::string k = key(sequence, rank, chunk);
    std::array<char, PMI2_MAX_VALLEN + 1> value{};
    int length = 0;
    if (const int rc = PMI2_KVS_Get(job_id_.c_str(), rank, k.c_str(), value.data(),
                                    PMI2_MAX_VALLEN, &length);
        rc != PMI2_SUCCESS)
      fail(Errc::bootstrap, pmi2_message("PMI2_KVS_Get(" + k + ") of rank " + std::to_string(rank), rc));
    return std::string(value.data(), strnlen(value.data(), PMI2_MAX_VALLEN));
  }

  int rank_ = 0;
  int size_ = 1;
  std::string job_id_;
  uint64_t sequence_ = 0;
};

}  // namespace

std::unique_ptr<Bootstrap> make_pmi2() { return std::make_unique<Pmi2Bootstrap>(); }

}  // namespace pcoll::bootstrap
