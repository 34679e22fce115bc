// PCOLL_FAULT: the fault-injection transport's configuration, parsed into rules.
//
// Grammar (docs/reliability.md has the full table):
//   spec := rule { ';' rule }
//   rule := action { ',' key '=' value }
//   action: delay | reorder | duplicate            (receive side: notification values)
//           eagain | access | reset                (send side: provider errors)
//           silent | kill | stop                   (the whole rank)
//   keys:   rank on at count every ms window mask match peer seed
// e.g. "reorder,window=4,ms=2;duplicate,mask=0xc000000000000000,match=0x8000000000000000"
//      "reset,rank=3,on=sigusr1"   "silent,rank=2,at=40"   "kill,rank=1,on=connect"
// Every mistake (unknown action or key, a key the action does not take, a missing required
// key, a malformed or out-of-range number, a key given twice) is Errc::invalid_argument
// naming PCOLL_FAULT, the rule and what is wrong: a fault test that silently injects
// nothing would pass for the wrong reason.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pcoll::transport::fault {

enum class Action { delay, reorder, duplicate, eagain, access, reset, silent, kill, stop };

// When a rule's event count starts.
enum class Trigger {
  start,    // from the transport's creation
  connect,  // at connect(), in the middle of communicator setup (silent, kill, stop, reset)
  sigusr1,  // once the process has received SIGUSR1 (a test raises it at the phase it aims at)
};

struct Rule {
  Action action = Action::delay;
  std::optional<int> rank;  // the rank that applies the rule; nullopt: every rank
  Trigger on = Trigger::start;
  // Events the rule counts: received notification values that match mask/match (delay,
  // reorder, duplicate), or operations aimed at a peer (write, write_notify, notify,
  // atomics) for the others. The rule applies from the at-th event after its trigger,
  // to every `every`-th one, `count` times.
  uint64_t at = 1;
  uint64_t count = UINT64_MAX;
  uint64_t every = 1;
  std::chrono::milliseconds ms{0};  // delay, reorder's longest hold, eagain's burst
  uint64_t window = 0;              // reorder: values shuffled together
  uint64_t mask = 0;                // receive rules: only values v with (v & mask) == match
  uint64_t match = 0;
  std::optional<int> peer;          // send rules: only operations aimed at this rank
  uint64_t seed = 1;                // reorder's shuffle
  std::string text;                 // the rule as written, for messages

  bool receive_side() const {
    return action == Action::delay || action == Action::reorder || action == Action::duplicate;
  }
};

const char* action_name(Action action);

// Parses a PCOLL_FAULT value; "" gives no rules. Throws Errc::invalid_argument.
std::vector<Rule> parse_spec(const std::string& spec);

// Checks what can only be checked once the job size is known (rank=, peer= below size).
void check_ranks(const std::vector<Rule>& rules, int size);

}  // namespace pcoll::transport::fault
