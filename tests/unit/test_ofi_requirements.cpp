// What pcoll requires of a libfabric provider and promises it (providers/ofi/
// ofi_requirements.hpp, ofi_context.hpp), checked without a NIC: fi_getinfo entries shaped
// like those verbs;ofi_rxm, efa, cxi and psm3 report (per their fi_<provider>(7) pages) are
// accepted or refused with the reason, and every operation context begins with an
// fi_context2 the provider may overwrite while the operation is in flight.
#include <doctest/doctest.h>

#include <cstring>
#include <set>
#include <string>
#include <vector>

#include <ofi/ofi_context.hpp>
#include <ofi/ofi_requirements.hpp>

using namespace pcoll::transport::ofi;

namespace {

// An fi_getinfo entry with its attribute structs, all pcoll reads; by default one that has
// everything (shm-like).
struct Entry {
  fi_info info{};
  fi_ep_attr ep{};
  fi_domain_attr domain{};
  fi_tx_attr tx{};
  fi_rx_attr rx{};

  Entry() {
    info.ep_attr = &ep;
    info.domain_attr = &domain;
    info.tx_attr = &tx;
    info.rx_attr = &rx;
    info.caps = FI_MSG | FI_RMA | FI_ATOMIC;
    ep.type = FI_EP_RDM;
    domain.cq_data_size = 8;
    domain.mr_mode = FI_MR_VIRT_ADDR;
    tx.inject_size = 4096;
  }
  Entry& mr_mode(uint64_t bits) {
    domain.mr_mode = static_cast<int>(bits);
    return *this;
  }
  Entry& mode(uint64_t bits) {
    info.mode = bits;
    return *this;
  }
  Entry& cq_data(size_t bytes) {
    domain.cq_data_size = bytes;
    return *this;
  }
  Entry& inject(size_t bytes) {
    tx.inject_size = bytes;
    return *this;
  }
  Entry& caps(uint64_t bits) {
    info.caps = bits;
    return *this;
  }
};

bool mentions(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("an entry shaped like verbs;ofi_rxm is accepted: FI_MR_LOCAL, provider keys, 4-byte CQ data") {
  Entry verbs;
  verbs.mr_mode(FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY).cq_data(4).inject(64);
  CHECK(unusable_because(verbs.info).empty());
}

TEST_CASE("an entry shaped like efa is accepted, with or without atomics") {
  Entry efa;
  efa.mr_mode(FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY).cq_data(4).inject(32);
  CHECK(unusable_because(efa.info).empty());
  efa.caps(FI_MSG | FI_RMA);  // atomics are not among pcoll's needs
  CHECK(unusable_because(efa.info).empty());
}

TEST_CASE("an entry shaped like cxi is accepted: MRs bound to the endpoint, provider keys") {
  Entry cxi;
  cxi.mr_mode(FI_MR_ENDPOINT | FI_MR_ALLOCATED | FI_MR_PROV_KEY).cq_data(8).inject(192);
  CHECK(unusable_because(cxi.info).empty());
}

TEST_CASE("entries that require FI_CONTEXT or FI_CONTEXT2 (psm3) are accepted") {
  Entry psm3;
  psm3.mode(FI_CONTEXT).mr_mode(0).cq_data(4).inject(64);
  CHECK(unusable_because(psm3.info).empty());
  psm3.mode(FI_CONTEXT2);
  CHECK(unusable_because(psm3.info).empty());
  Entry raw;
  raw.mr_mode(FI_MR_RAW | FI_MR_PROV_KEY | FI_MR_LOCAL).mode(FI_ASYNC_IOV | FI_LOCAL_MR);
  CHECK(unusable_because(raw.info).empty());
}

TEST_CASE("a mode pcoll cannot honour is refused, naming the bit") {
  for (const uint64_t bit : {FI_RX_CQ_DATA, FI_MSG_PREFIX, FI_NOTIFY_FLAGS_ONLY, FI_RESTRICTED_COMP, FI_BUFFERED_RECV}) {
    Entry entry;
    entry.mode(FI_CONTEXT | bit);
    const std::string why = unusable_because(entry.info);
    CAPTURE(why);
    // The offending bit alone, not FI_CONTEXT, which pcoll honours.
    CHECK(mentions(why, "asks for mode " + mode_names(bit) + ","));
  }
}

TEST_CASE("an mr_mode pcoll does not implement is refused, naming the bit") {
  Entry mmu;
  CHECK(mentions(unusable_because(mmu.mr_mode(FI_MR_MMU_NOTIFY | FI_MR_LOCAL).info), "FI_MR_MMU_NOTIFY"));
  Entry rma_event;
  CHECK(mentions(unusable_because(rma_event.mr_mode(FI_MR_RMA_EVENT).info), "FI_MR_RMA_EVENT"));
  Entry basic;
  CHECK(mentions(unusable_because(basic.mr_mode(FI_MR_BASIC).info), "FI_MR_BASIC"));
}

TEST_CASE("too little remote CQ data or inject, or a missing capability, is refused with the number") {
  Entry no_data;
  const std::string data = unusable_because(no_data.cq_data(0).info);
  CHECK(mentions(data, "cq_data_size"));
  CHECK(mentions(data, "0 bytes"));
  Entry tiny_inject;
  const std::string inject = unusable_because(tiny_inject.inject(4).info);
  CHECK(mentions(inject, "inject size 4"));
  Entry no_rma;
  CHECK(mentions(unusable_because(no_rma.caps(FI_MSG | FI_ATOMIC).info), "FI_RMA"));
  Entry no_msg;
  CHECK(mentions(unusable_because(no_msg.caps(FI_RMA).info), "FI_MSG"));
  Entry connected;
  connected.ep.type = FI_EP_MSG;
  CHECK(mentions(unusable_because(connected.info), "FI_EP_RDM"));
}

TEST_CASE("every operation context begins with an fi_context2 at the address libfabric is given") {
  WriteOp write;
  AtomicSlot atomic;
  RecvSlot recv;
  for (Op* op : {static_cast<Op*>(&write), static_cast<Op*>(&atomic), static_cast<Op*>(&recv)}) {
    CHECK(op->context() == static_cast<void*>(&op->provider));
    CHECK(&Op::of(op->context()) == op);
  }
  CHECK(Op::of(write.context()).kind == Op::Kind::write);
  CHECK(Op::of(atomic.context()).kind == Op::Kind::atomic);
  CHECK(Op::of(recv.context()).kind == Op::Kind::recv);
}

TEST_CASE("a provider writing over its fi_context2 leaves pcoll's fields intact") {
  WriteBucket bucket;
  WriteOp write;
  write.bucket = &bucket;
  uint64_t words[3] = {};
  AtomicSlot atomic;
  atomic.state = AtomicSlot::State::busy;
  atomic.peer = 3;
  atomic.words = words;
  RecvSlot recv;
  recv.value = words;
  // What FI_CONTEXT2 lets a provider do with the context it was given: all of it is its own.
  for (void* context : {write.context(), atomic.context(), recv.context()})
    std::memset(context, 0xA5, sizeof(fi_context2));
  CHECK(Op::of(write.context()).kind == Op::Kind::write);
  CHECK(static_cast<WriteOp&>(Op::of(write.context())).bucket == &bucket);
  CHECK(Op::of(atomic.context()).kind == Op::Kind::atomic);
  CHECK(atomic.state == AtomicSlot::State::busy);
  CHECK(atomic.peer == 3);
  CHECK(atomic.words == words);
  CHECK(recv.value == words);
}

TEST_CASE("a write context is never handed out while its write is in flight") {
  WriteOpPool pool;
  WriteBucket bucket;
  std::vector<WriteOp*> in_flight;
  std::set<void*> contexts;
  for (int i = 0; i < 1000; ++i) {
    WriteOp& op = pool.take(bucket);
    CHECK(op.bucket == &bucket);
    in_flight.push_back(&op);
    contexts.insert(op.context());
  }
  CHECK(contexts.size() == 1000);  // one each
  CHECK(pool.in_flight() == 1000);
  // Growing the pool did not move a context a provider still holds.
  for (WriteOp* op : in_flight) CHECK(op->bucket == &bucket);
  WriteOp* completed = in_flight[500];
  pool.give_back(*completed);
  CHECK(pool.in_flight() == 999);
  WriteOp& next = pool.take(bucket);
  CHECK(&next == completed);  // only a completed one comes back
}
