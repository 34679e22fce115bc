// The survivors' channel: ordered, reliable messages of any length between the ranks of a
// communicator, for what the survivors of a failure say to each other while they shrink
// (the agreement on the failed set, survivor_agreement.hpp, and the exchange that sets up
// their new communicator). It works whether or not the communicator has failed, and it
// never waits on a peer: a dead peer only keeps its own messages queued.
//
// Each rank owns a registered region of two parts, P x 2 slots each: the inbox, where
// sender s writes into its slots [s][0..1], and the outbox, where this rank stages what it
// writes to peer p in [p][0..1]. Message fragment n from s to p travels in slot n & 1 with
// the notice (kControlSurvivor, s, n); p consumes fragments in order and acknowledges with
// (kControlSurvivorAck, p, count consumed). A sender keeps at most two fragments unacknowledged
// per peer, so a slot is rewritten only once its last content was read, and the staged bytes
// only once the write that read them has landed: no flush (which waits on every peer, the
// dead one too) is ever needed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include <collectives/notification.hpp>
#include <support/error.hpp>
#include <transport/transport.hpp>

namespace pcoll {

class SurvivorChannel {
 public:
  static constexpr size_t kSlotBytes = 512;

  SurvivorChannel(transport::Transport& transport, const NoticeCodec& codec, int rank, int size);
  ~SurvivorChannel();
  SurvivorChannel(const SurvivorChannel&) = delete;
  SurvivorChannel& operator=(const SurvivorChannel&) = delete;

  // Setup: the region's key, then every rank's keys in rank order.
  transport::Bytes remote_key() const { return region_->remote_key(); }
  void connect(const std::vector<std::vector<std::byte>>& keys);
  // Bytes of registered memory per rank: 4 P slots.
  static size_t region_bytes(int size) { return 4 * static_cast<size_t>(size) * kSlotBytes; }

  // Queues `message` for `peer` and writes what the window allows. A peer whose write fails
  // is taken for gone: its queue is dropped, and so is what is sent to it later.
  void send(int peer, std::span<const std::byte> message);
  // The notices (engine lock held). A notice that makes no sense (a sequence outside the
  // window, a slot whose stamp does not match) is Errc::protocol naming the sender.
  void on_message(int sender, uint64_t sequence_low);
  void on_ack(int sender, uint64_t count_low);
  // The whole messages that arrived since the last call, in each sender's order.
  std::vector<std::pair<int, std::vector<std::byte>>> take();

 private:
  struct Head {
    uint32_t stamp = 0;   // 1 + the fragment's sequence (low 32 bits): what the notice names
    uint16_t bytes = 0;   // payload bytes in this slot
    uint8_t last = 0;     // 1: the message ends with this fragment
    uint8_t pad = 0;
  };
  static constexpr size_t kPayload = kSlotBytes - sizeof(Head);
  struct Peer {
    std::unique_ptr<transport::RemoteRegion> region;
    std::deque<std::vector<std::byte>> queue;  // fragments not written yet, head included
    uint64_t sent = 0;       // fragments written to it
    uint64_t acked = 0;      // fragments it has consumed
    uint64_t consumed = 0;   // its fragments this rank has consumed
    bool arrived[2] = {false, false};  // [slot]: fragment `consumed` or the next one landed
    std::vector<std::byte> partial;   // the message being reassembled
    bool gone = false;
  };
  // `rank`'s state, once it is a peer's rank (Errc::protocol naming `what` otherwise).
  Peer& sender(const char* what, int rank);
  size_t inbox(int sender, uint64_t sequence) const;
  size_t outbox(int peer, uint64_t sequence) const;
  void pump(int peer);
  // A write or notify to `peer` failed: it is taken for gone, and what is queued for it dropped.
  void give_up(int peer, const Error& error);
  void consume(int sender);

  transport::Transport& transport_;
  const NoticeCodec& codec_;
  int rank_;
  int size_;
  std::unique_ptr<transport::LocalRegion> region_;
  std::vector<Peer> peers_;
  std::vector<std::pair<int, std::vector<std::byte>>> ready_;
};

}  // namespace pcoll
