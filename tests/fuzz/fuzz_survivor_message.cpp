// libFuzzer target: the survivors' agreement messages (lib/collectives/survivor_agreement).
// A peer's bytes must either be refused by name (Errc::protocol) or give a message that
// could exist in a job of that size (ascending ranks in range, a ballot that is a rank),
// which encodes back to the same bytes and which an agreement in progress takes without
// harm, whatever it says.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include <collectives/survivor_agreement.hpp>
#include <support/error.hpp>

using namespace pcoll;

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

struct Quiet final : SurvivorAgreement::Sink {
  void send(int peer, const SurvivorMessage&) override { check(peer >= 0); }
};

bool ascending_in(const std::vector<int>& ranks, int size) {
  for (size_t i = 0; i < ranks.size(); ++i)
    if (ranks[i] < 0 || ranks[i] >= size || (i > 0 && ranks[i] <= ranks[i - 1])) return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int ranks = 1 + data[0] % 64;  // the job's size, from the first byte
  const auto bytes = std::span(reinterpret_cast<const std::byte*>(data) + 1, size - 1);
  SurvivorMessage message;
  try {
    message = decode_survivor_message(bytes, ranks, 0);
  } catch (const Error& e) {
    check(e.code() == Errc::protocol);
    return 0;
  }
  check(message.ballot >= 0 && message.ballot < ranks);
  check(message.accepted_ballot >= -1 && message.accepted_ballot < ranks);
  check(ascending_in(message.failed, ranks) && ascending_in(message.accepted, ranks));
  const std::vector<std::byte> again = encode(message);
  check(again.size() == bytes.size());
  for (size_t i = 0; i < again.size(); ++i) check(again[i] == bytes[i]);
  // Delivered from every sender to an agreement that has begun.
  Quiet sink;
  SurvivorAgreement agreement(ranks - 1, ranks, message.epoch, sink);
  agreement.start({});
  for (int from = 0; from < ranks; ++from) agreement.on_message(from, message);
  return 0;
}
