// The survivors' channel (survivor_channel.hpp).
#include <collectives/survivor_channel.hpp>

#include <algorithm>
#include <cstring>
#include <string>

#include <support/error.hpp>
#include <support/log.hpp>

namespace pcoll {

SurvivorChannel::SurvivorChannel(transport::Transport& transport, const NoticeCodec& codec, int rank, int size)
    : transport_(transport), codec_(codec), rank_(rank), size_(size), peers_(static_cast<size_t>(size)) {
  region_ = transport_.allocate(region_bytes(size));
}

SurvivorChannel::~SurvivorChannel() = default;

void SurvivorChannel::connect(const std::vector<std::vector<std::byte>>& keys) {
  for (int r = 0; r < size_; ++r)
    if (r != rank_) peers_[static_cast<size_t>(r)].region = transport_.import_region(r, keys[static_cast<size_t>(r)]);
}

size_t SurvivorChannel::inbox(int sender, uint64_t sequence) const {
  return (2 * static_cast<size_t>(sender) + (sequence & 1)) * kSlotBytes;
}

size_t SurvivorChannel::outbox(int peer, uint64_t sequence) const {
  return (2 * static_cast<size_t>(size_) + 2 * static_cast<size_t>(peer) + (sequence & 1)) * kSlotBytes;
}

void SurvivorChannel::send(int peer, std::span<const std::byte> message) {
  Peer& p = peers_[static_cast<size_t>(peer)];
  if (p.gone) return;
  // Fragments of kPayload bytes, each with its head; an empty message is one empty fragment.
  size_t at = 0;
  do {
    const size_t bytes = std::min(kPayload, message.size() - at);
    Head head;
    head.bytes = static_cast<uint16_t>(bytes);
    head.last = at + bytes == message.size() ? 1 : 0;
    std::vector<std::byte> fragment(sizeof head + bytes);
    std::memcpy(fragment.data(), &head, sizeof head);
    if (bytes != 0) std::memcpy(fragment.data() + sizeof head, message.data() + at, bytes);
    p.queue.push_back(std::move(fragment));
    at += bytes;
  } while (at < message.size());
  pump(peer);
}

void SurvivorChannel::give_up(int peer, const Error& error) {
  log::debug(std::string("survivors' channel: rank ") + std::to_string(peer) + " taken for gone: " + error.what());
  Peer& p = peers_[static_cast<size_t>(peer)];
  p.gone = true;
  p.queue.clear();
}

void SurvivorChannel::pump(int peer) {
  Peer& p = peers_[static_cast<size_t>(peer)];
  while (!p.gone && !p.queue.empty() && p.sent - p.acked < 2) {
    std::vector<std::byte>& fragment = p.queue.front();
    const auto stamp = static_cast<uint32_t>(p.sent + 1);
    std::memcpy(fragment.data(), &stamp, sizeof stamp);
    std::byte* staged = region_->bytes().data() + outbox(peer, p.sent);
    std::memcpy(staged, fragment.data(), fragment.size());
    try {
      transport_.write_notify(*region_, outbox(peer, p.sent), *p.region, inbox(rank_, p.sent), fragment.size(),
                              codec_.control(kControlSurvivor, static_cast<uint32_t>(rank_), p.sent));
    } catch (const Error& error) {
      give_up(peer, error);
      return;
    }
    ++p.sent;
    p.queue.pop_front();
  }
}

SurvivorChannel::Peer& SurvivorChannel::sender(const char* what, int rank) {
  if (rank < 0 || rank >= size_ || rank == rank_)
    fail(Errc::protocol, std::string("survivors' ") + what + " from rank " + std::to_string(rank) + " of a job of " +
                             std::to_string(size_));
  return peers_[static_cast<size_t>(rank)];
}

void SurvivorChannel::on_message(int sender, uint64_t sequence_low) {
  Peer& p = this->sender("message", sender);
  const uint64_t sequence = codec_.widen_sequence(sequence_low, p.consumed);
  if (sequence < p.consumed) return;  // a duplicate of one consumed already
  if (sequence > p.consumed + 1)
    fail(Errc::protocol, "rank " + std::to_string(sender) + " sent survivors' message " + std::to_string(sequence) +
                             " while this rank has consumed " + std::to_string(p.consumed) +
                             " of its messages (at most two may be outstanding)");
  p.arrived[sequence & 1] = true;
  consume(sender);
}

void SurvivorChannel::consume(int sender) {
  Peer& p = peers_[static_cast<size_t>(sender)];
  const uint64_t before = p.consumed;
  while (p.arrived[p.consumed & 1]) {
    const std::byte* slot = region_->bytes().data() + inbox(sender, p.consumed);
    Head head;
    std::memcpy(&head, slot, sizeof head);
    if (head.stamp != static_cast<uint32_t>(p.consumed + 1) || head.bytes > kPayload || head.last > 1)
      fail(Errc::protocol, "rank " + std::to_string(sender) + "'s survivors' message " + std::to_string(p.consumed) +
                               " is malformed (stamp " + std::to_string(head.stamp) + ", " +
                               std::to_string(head.bytes) + " bytes)");
    p.partial.insert(p.partial.end(), slot + sizeof head, slot + sizeof head + head.bytes);
    p.arrived[p.consumed & 1] = false;
    ++p.consumed;
    if (head.last != 0) {
      ready_.emplace_back(sender, std::move(p.partial));
      p.partial.clear();
    }
  }
  if (p.consumed == before || p.gone) return;
  try {
    transport_.notify(sender, codec_.control(kControlSurvivorAck, static_cast<uint32_t>(rank_), p.consumed));
  } catch (const Error& error) {
    give_up(sender, error);
  }
}

void SurvivorChannel::on_ack(int sender, uint64_t count_low) {
  Peer& p = this->sender("acknowledgement", sender);
  const uint64_t count = codec_.widen_sequence(count_low, p.acked);
  if (count > p.sent)
    fail(Errc::protocol, "rank " + std::to_string(sender) + " acknowledged " + std::to_string(count) +
                             " survivors' messages of the " + std::to_string(p.sent) + " sent to it");
  p.acked = std::max(p.acked, count);
  pump(sender);
}

std::vector<std::pair<int, std::vector<std::byte>>> SurvivorChannel::take() {
  std::vector<std::pair<int, std::vector<std::byte>>> out;
  out.swap(ready_);
  return out;
}

}  // namespace pcoll
