// The plan executor (plan_executor.hpp): posting, reducing and crediting a plan's chunks.
#include <collectives/plan_executor.hpp>

#include <algorithm>
#include <string>

#include <support/error.hpp>

namespace pcoll {

void PlanExecutor::Arrivals::clear() {
  for (const uint32_t c : order) seen[c] = done[c] = 0;
  order.clear();
  handled = prefix = credited = 0;
}

PlanExecutor::PlanExecutor(ReducePlan plan, size_t inject_elems, uint32_t handle, bool marks_starts)
    : plan_(std::move(plan)), inject_elems_(inject_elems), handle_(handle), marks_starts_(marks_starts) {
  // A last step that receives and reduces the whole vector (recursive doubling without a
  // fold-in post step) produces final values chunk by chunk: they can be handed to the
  // application while still in cache instead of in a second pass at the end.
  for (size_t i = plan_.steps.size(); i-- > 0;) {
    const Step& step = plan_.steps[i];
    if (!step.receives()) continue;
    if (step.reduces() && step.recv->offset == 0 && step.recv->count == plan_.count) final_step_ = i;
    break;
  }
  send_step_of_tag_.assign(plan_.tag_count, -1);
  peer_of_tag_.assign(plan_.tag_count, -1);
  for (size_t i = 0; i < plan_.steps.size(); ++i) {
    if (plan_.steps[i].sends()) send_step_of_tag_[plan_.steps[i].tag] = static_cast<int>(i);
    if (plan_.steps[i].receives()) peer_of_tag_[plan_.steps[i].tag] = plan_.steps[i].peer;
  }
  credit_.assign(plan_.tag_count, 0);
  sent_.assign(plan_.tag_count, 0);
  for (auto& per_parity : arrivals_) {
    per_parity.resize(plan_.tag_count);
    for (const Step& step : plan_.steps) {
      if (!step.receives()) continue;
      per_parity[step.tag].seen.assign(step.recv->chunk_count(), 0);
      per_parity[step.tag].done.assign(step.recv->chunk_count(), 0);
    }
  }
}

bool PlanExecutor::announces_start_to(int peer) const {
  return marks_starts_ && !plan_.steps.empty() && plan_.steps[0].sends() && plan_.steps[0].peer == peer;
}

void PlanExecutor::begin_round(bool announce_start) {
  // Only a first step that sends at once can carry the mark (announces_start_to).
  announce_start_ = announce_start && !plan_.steps.empty() && announces_start_to(plan_.steps[0].peer);
  step_ = 0;
  step_traced_ = false;
  posted_chunks_ = 0;
  settled_chunks_ = 0;
  processed_ = 0;
  deferred_.clear();
}

void PlanExecutor::end_round(uint64_t round) {
  for (Arrivals& tag : arrivals_[round & 1]) tag.clear();
  started_by_[round & 1] = -1;
}

void PlanExecutor::settle(ExecutorPort& port) {
  if (!large_writes_pending_) return;
  port.settle_writes();
  large_writes_pending_ = false;
}

bool PlanExecutor::run(uint64_t round, ExecutorPort& port) {
  while (step_ < plan_.steps.size()) {
    const Step& step = plan_.steps[step_];
    if (!step_traced_) {
      port.step_started(round, step_);
      step_traced_ = true;
    }
    const bool sent = !step.sends() || post_sends(step, round, port);
    const bool received = !step.receives() || reduce_arrivals(step, round, port);
    if (!sent || !received) return false;
    port.step_ended(round, step_);
    step_traced_ = false;
    ++step_;
    posted_chunks_ = 0;
    settled_chunks_ = 0;
    processed_ = 0;
    deferred_.clear();
    ++moves_;
  }
  return true;
}

// Posts what the window allows; true once every chunk of the step's send is posted.
bool PlanExecutor::post_sends(const Step& step, uint64_t round, ExecutorPort& port) {
  const Transfer& send = *step.send;
  const size_t chunks = send.chunk_count();
  if (posted_chunks_ == chunks) return true;
  // A chunk that lands in the peer's slot may go once its ring position is free: every
  // chunk of round - 2 is reduced there (reduce_plan.hpp, Transfer), and whatever the
  // peer's credits say beyond that.
  uint64_t free_below = UINT64_MAX;
  if (!send.lands_in_result()) {
    const uint64_t reduced = std::max<uint64_t>(round == 0 ? 0 : send.sequence(round - 1, 0), credit_[step.tag]);
    free_below = reduced + send.slot_depth;
  }
  if (send.chunk(0).count > inject_elems_) large_writes_pending_ = true;
  for (; posted_chunks_ < chunks; ++posted_chunks_) {
    if (send.sequence(round, posted_chunks_) >= free_below) break;
    // The round's first write of a rank that started it says so (announces_start_to).
    const uint32_t tag = announce_start_ ? step.tag + plan_.tag_count : step.tag;
    announce_start_ = false;
    port.write_chunk(step, send.chunk(posted_chunks_), round, tag);
  }
  if (!send.lands_in_result()) sent_[step.tag] = send.sequence(round, posted_chunks_);
  return posted_chunks_ == chunks;
}

// Handles the chunks of this step that arrived: reduces those that land in a slot (each
// once its range is no longer the source of our own send), counts those that land in the
// result, and tells a windowed sender which positions are free again.
bool PlanExecutor::reduce_arrivals(const Step& step, uint64_t round, ExecutorPort& port) {
  const Transfer& recv = *step.recv;
  Arrivals& arrivals = arrivals_[round & 1][step.tag];
  const size_t chunks = recv.chunk_count();
  if (arrivals.handled == chunks) return true;
  if (recv.lands_in_result()) {
    arrivals.handled = arrivals.order.size();
    return arrivals.handled == chunks;
  }
  // Recursive doubling reduces the range it sends: chunk c only after our chunk c went,
  // and, above the inject size, completed.
  const bool own_source = step.sends() && ranges_overlap(*step.send, recv);
  const bool large = recv.chunk(0).count > inject_elems_;
  const bool final = step_ == final_step_;
  const size_t before = arrivals.handled;
  const auto try_reduce = [&](uint32_t c) {
    if (own_source) {
      if (c >= posted_chunks_) return false;
      if (large && c >= settled_chunks_) {
        port.settle_writes();
        settled_chunks_ = posted_chunks_;
        large_writes_pending_ = false;
      }
    }
    port.reduce_chunk(step, recv.chunk(c), round, final);
    arrivals.done[c] = 1;
    while (arrivals.prefix < chunks && arrivals.done[arrivals.prefix]) ++arrivals.prefix;
    ++arrivals.handled;
    return true;
  };
  if (!deferred_.empty()) std::erase_if(deferred_, [&](uint32_t c) { return try_reduce(c); });
  for (; processed_ < arrivals.order.size(); ++processed_) {
    const uint32_t c = arrivals.order[processed_];
    if (!try_reduce(c)) deferred_.push_back(c);
  }
  if (arrivals.handled != before && recv.windowed()) credit_sender(step, round, arrivals.handled == chunks, port);
  return arrivals.handled == chunks;
}

// Credits go out a quarter ring at a time, and when the round's chunks are all reduced
// (then the sender may fill the ring with the next round's).
void PlanExecutor::credit_sender(const Step& step, uint64_t round, bool finished, ExecutorPort& port) {
  Arrivals& arrivals = arrivals_[round & 1][step.tag];
  const size_t quarter = std::max<size_t>(1, step.recv->slot_depth / 4);
  if (!finished && arrivals.prefix - arrivals.credited < quarter) return;
  arrivals.credited = arrivals.prefix;
  if (finished) port.send_credit(step, round + 1, 0);
  else port.send_credit(step, round, static_cast<uint32_t>(arrivals.prefix));
}

bool PlanExecutor::on_data(uint64_t round, uint64_t completed, uint32_t tag, uint32_t chunk) {
  if (stale_data_round(round, completed, handle_, duplicates_)) return false;
  // A tag above the plan's is an exchange's, marked: its sender started the round.
  const bool started = marks_starts_ && tag >= plan_.tag_count && tag < 2 * plan_.tag_count;
  if (started) tag -= plan_.tag_count;
  if (tag >= plan_.tag_count)
    fail(Errc::protocol, "data for handle " + std::to_string(handle_) + " with exchange tag " + std::to_string(tag) +
                             " (this plan has " + std::to_string(plan_.tag_count) + ")");
  Arrivals& arrivals = arrivals_[round & 1][tag];
  if (chunk >= arrivals.seen.size())
    fail(Errc::protocol, "chunk " + std::to_string(chunk) + " of exchange " + std::to_string(tag) + " of handle " +
                             std::to_string(handle_) + " has only " + std::to_string(arrivals.seen.size()) + " chunks");
  if (arrivals.seen[chunk]) {
    ++duplicates_;
    return false;
  }
  arrivals.seen[chunk] = 1;
  arrivals.order.push_back(chunk);
  if (started) started_by_[round & 1] = peer_of_tag_[tag];
  ++moves_;
  return true;
}

bool PlanExecutor::on_credit(uint64_t round, uint32_t tag, uint32_t chunk) {
  const int index = tag < send_step_of_tag_.size() ? send_step_of_tag_[tag] : -1;
  if (index < 0 || plan_.steps[static_cast<size_t>(index)].send->lands_in_result())
    fail(Errc::protocol, "credit for exchange " + std::to_string(tag) + " of handle " + std::to_string(handle_) +
                             ", which sends nothing into a landing slot from this rank");
  const Transfer& send = *plan_.steps[static_cast<size_t>(index)].send;
  if (chunk >= send.chunk_count())
    fail(Errc::protocol, "credit for chunk " + std::to_string(chunk) + " of exchange " + std::to_string(tag) +
                             " of handle " + std::to_string(handle_) + ", which has " +
                             std::to_string(send.chunk_count()) + " chunks");
  const uint64_t reduced = send.sequence(round, chunk);
  if (reduced > sent_[tag])
    fail(Errc::protocol, "credit for " + std::to_string(reduced) + " chunks of exchange " + std::to_string(tag) +
                             " of handle " + std::to_string(handle_) + ", of which this rank sent " +
                             std::to_string(sent_[tag]));
  if (reduced <= credit_[tag]) return false;  // a duplicate, or overtaken by a later credit
  credit_[tag] = reduced;
  ++moves_;
  return true;
}

}  // namespace pcoll
