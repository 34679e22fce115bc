// The contexts pcoll hands to libfabric with each operation (`context`, msg.context) and what
// a completion finds in them.
//
// Providers that require FI_CONTEXT or FI_CONTEXT2 (psm3, among others) keep their own state
// for an operation in the caller's context until the operation completes. So every context
// begins with a struct fi_context2 that belongs to the provider while the operation is in
// flight, and no context serves two operations in flight at once: each write takes a WriteOp
// of its own, each atomic an AtomicSlot, each posted receive a RecvSlot. Header-only over
// <rdma/fabric.h>, so that tests/unit/test_ofi_requirements.cpp checks the layout.
#pragma once

#include <rdma/fabric.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <type_traits>
#include <vector>

namespace pcoll::transport::ofi {

// The start of every operation context.
struct Op {
  enum class Kind : uint8_t { write, atomic, recv };
  explicit Op(Kind k) : kind(k) {}

  // Owned by the provider from the post until the completion is read (FI_CONTEXT /
  // FI_CONTEXT2); pcoll never reads it. It must be at the address libfabric is given.
  fi_context2 provider{};
  Kind kind;

  // What an operation passes as its context: the fi_context2 itself.
  void* context() { return &provider; }
  // The Op whose context() a completion (op_context) returned. Op is standard-layout and
  // `provider` its first member, so the two addresses are one.
  static Op& of(void* context) { return *reinterpret_cast<Op*>(context); }
};
static_assert(std::is_standard_layout_v<Op>, "Op must be standard-layout: its address is its fi_context2's");
static_assert(offsetof(Op, provider) == 0, "fi_context2 must come first in every operation context");
static_assert(sizeof(fi_context2) >= 2 * sizeof(fi_context), "FI_CONTEXT2 asks for two fi_context");

// Writes to one peer posted in one flush epoch (parity). flush() flips the epoch and waits
// until the old epoch's buckets drain, so ops posted later never delay it. A bucket is not
// itself a context: many of its writes are in flight at once, each with its own WriteOp.
struct WriteBucket {
  int peer = -1;
  uint64_t outstanding = 0;
  // When the bucket last moved: its first post after being drained, or a completion.
  // Outstanding writes that do not move for the timeout are a delivery error (a target
  // that dropped them: libfabric 1.17's shm never completes a write with a wrong key).
  std::chrono::steady_clock::time_point moved;
  std::string error;  // first CQ error of this epoch, reported by flush()
};

// The context of one write in flight, naming the bucket it counts in.
struct WriteOp : Op {
  WriteOp() : Op(Kind::write) {}
  WriteBucket* bucket = nullptr;
};

// WriteOps for the writes in flight. A WriteOp goes back only when its completion (or error
// completion) was read, so a provider never finds its context reused under it. Grows to the
// largest number of writes in flight at once, which the transmit queue bounds; steady state
// allocates nothing.
class WriteOpPool {
 public:
  WriteOp& take(WriteBucket& bucket) {
    if (free_.empty()) {
      ops_.emplace_back();
      free_.push_back(&ops_.back());
    }
    WriteOp* op = free_.back();
    free_.pop_back();
    op->bucket = &bucket;
    return *op;
  }
  void give_back(WriteOp& op) {
    op.bucket = nullptr;
    free_.push_back(&op);
  }
  size_t in_flight() const { return ops_.size() - free_.size(); }

 private:
  std::deque<WriteOp> ops_;     // a deque: growing it never moves a context a provider holds
  std::vector<WriteOp*> free_;
};

// One blocking atomic in flight. Its operand/compare/result words live in the registered
// scratch region (FI_MR_LOCAL providers need them registered). A slot whose caller timed
// out stays `abandoned` until its completion arrives, so the provider never writes into
// memory that was reused, nor finds its context handed to another atomic.
struct AtomicSlot : Op {
  AtomicSlot() : Op(Kind::atomic) {}
  enum class State : uint8_t { free, busy, done, abandoned };
  State state = State::free;
  int peer = -1;
  std::string error;
  uint64_t* words = nullptr;  // [0] operand, [1] compare, [2] result
};

// A posted 8-byte receive for notify() messages; re-posted only after its completion.
struct RecvSlot : Op {
  RecvSlot() : Op(Kind::recv) {}
  uint64_t* value = nullptr;
};

}  // namespace pcoll::transport::ofi
