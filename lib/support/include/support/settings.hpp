// The settings table: every PCOLL_* environment variable that pcoll, its tools or its tests
// read, declared once with its type, default, accepted values, who sets it and one line of
// doc (UCX's config table is the model). Code reads these variables only through the
// readers below, which take the default and the range from the table, so a default is
// written nowhere else and a misspelled name does not compile. `pcoll_info --config` prints
// the table with the values in effect; communicator setup warns about PCOLL_* names in the
// environment that the table does not know (a typo such as PCOLL_TIMEOUT).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <support/pcoll_config.h>

namespace pcoll::settings {

// Who sets a variable. Only user settings belong in README's table; all three kinds are
// known names, so none of them is warned about.
enum class Kind {
  user,      // a choice or tuning knob for whoever runs the program
  launcher,  // set by pcollrun for its ranks, or by hand on each host of a manual job
  test,      // set by the test suites for the programs they start
};

// How a value is read.
enum class Type {
  unsigned_int,        // a decimal integer in [min, max]
  choice,              // one of `choices`
  choice_or_unsigned,  // one of `choices`, or a decimal integer in [min, max]
  text,                // free text that its reader checks (a provider selector, host:port, a path)
};

struct Setting {
  std::string_view name;
  Kind kind;
  Type type;
  // The value in effect when the variable is unset (or empty), written as a user would
  // write it. Empty when there is none: the reader then does without (the closest NIC) or
  // says that the variable is needed (PCOLL_ROOT for a manual job).
  std::string_view fallback;
  uint64_t min = 0;  // unsigned_int, choice_or_unsigned
  uint64_t max = 0;
  std::span<const std::string_view> choices = {};  // choice, choice_or_unsigned
  std::string_view doc;
};

inline constexpr std::string_view kBootstrapChoices[] = {"auto", "pmix", "pmi2", "store", "single"};
inline constexpr std::string_view kLogChoices[] = {"error", "warn", "info", "debug", "trace"};
inline constexpr std::string_view kYieldChoices[] = {"auto", "always", "never"};
inline constexpr std::string_view kProgressCpuWords[] = {"auto", "none"};
inline constexpr std::string_view kLauncherChoices[] = {"manual", "pcollrun"};
inline constexpr std::string_view kNotifyBitsChoices[] = {"auto", "32", "64"};
inline constexpr std::string_view kLocalPathChoices[] = {"shm", "network"};

// The one-node default provider: UCX shared memory where UCX is built in. Its puts are
// copies by the initiator into the peer's mapped segment, so a peer busy reducing does not
// hold up our data; libfabric 1.17's shm moves large writes by cma in the target's
// progress. Measured on the same host (docs/performance.md): at 64 KiB and above ucx:shm
// runs a P=2 allreduce 3-6x faster than ofi:shm.
inline constexpr std::string_view kDefaultProvider = PCOLL_HAVE_UCX ? "ucx:shm" : "ofi:shm";

// The table, in the order pcoll_info --config prints it.
inline constexpr auto kTable = std::to_array<Setting>({
    // --- user settings (README.md, "Running") -------------------------------------------
    {.name = "PCOLL_PROVIDER", .kind = Kind::user, .type = Type::text, .fallback = kDefaultProvider,
     .doc = "transport provider: ofi, ofi:shm, ofi:tcp, ofi:sockets, ucx, ucx:shm, ucx:tcp "
            "(pcoll_info lists them); fault+<selector> wraps one in the fault-injection transport"},
    {.name = "PCOLL_FAULT", .kind = Kind::user, .type = Type::text, .fallback = "",
     .doc = "faults the fault-injection transport (PCOLL_PROVIDER=fault+<selector>) injects: "
            "docs/reliability.md gives the grammar"},
    {.name = "PCOLL_TIMEOUT_MS", .kind = Kind::user, .type = Type::unsigned_int, .fallback = "30000",
     .min = 1, .max = 86400000,
     .doc = "how long a silent peer may stay silent before it is reported"},
    {.name = "PCOLL_PROGRESS_CPU", .kind = Kind::user, .type = Type::choice_or_unsigned, .fallback = "auto",
     .min = 0, .max = 65535, .choices = kProgressCpuWords,
     .doc = "CPU for the progress thread: a CPU number, auto (hwloc: a core the application is "
            "least likely to use) or none"},
    {.name = "PCOLL_NIC", .kind = Kind::user, .type = Type::text, .fallback = "",
     .doc = "NIC to use (libfabric domain or UCX device); unset: the one closest to the process"},
    {.name = "PCOLL_BOOTSTRAP", .kind = Kind::user, .type = Type::choice, .fallback = "auto",
     .choices = kBootstrapChoices,
     .doc = "pmix, pmi2, store or single instead of what the launcher's environment says (auto)"},
    {.name = "PCOLL_LOG", .kind = Kind::user, .type = Type::choice, .fallback = "warn", .choices = kLogChoices,
     .doc = "log level on stderr"},
    {.name = "PCOLL_SPIN_US", .kind = Kind::user, .type = Type::unsigned_int, .fallback = "50",
     .min = 0, .max = 1000000,
     .doc = "how long a waiting caller keeps driving progress itself after the engine last moved, "
            "before sleeping"},
    {.name = "PCOLL_YIELD", .kind = Kind::user, .type = Type::choice, .fallback = "auto", .choices = kYieldChoices,
     .doc = "whether a spinning waiter yields its CPU between polls: auto (when the node runs more "
            "ranks than CPUs), always, never"},
    {.name = "PCOLL_CHUNK_BYTES", .kind = Kind::user, .type = Type::unsigned_int, .fallback = "262144",
     .min = 4096, .max = uint64_t{1} << 30,
     .doc = "pipelining chunk of large reductions"},
    {.name = "PCOLL_POOL_BYTES", .kind = Kind::user, .type = Type::unsigned_int, .fallback = "8388608",
     .min = 8192, .max = uint64_t{1} << 40,
     .doc = "landing pool of a handle per incoming exchange (a peer whose data this rank reduces): "
            "at least two chunks of PCOLL_CHUNK_BYTES; a smaller vector takes only what two rounds need"},
    {.name = "PCOLL_LOCAL_PATH", .kind = Kind::user, .type = Type::choice, .fallback = "shm",
     .choices = kLocalPathChoices,
     .doc = "how a network provider (ofi, ofi:verbs, ..., the default on several hosts) reaches "
            "ranks on this host: shm (libfabric shm; UCX's own shared memory) or network (through "
            "the NIC, e.g. to measure it between two processes of one host)"},
    {.name = "PCOLL_NOTIFY_BITS", .kind = Kind::user, .type = Type::choice, .fallback = "auto",
     .choices = kNotifyBitsChoices,
     .doc = "notification width: auto (64 where the provider carries them, else 32), 32 (the layout "
            "of NICs with 4-byte remote CQ data, on any provider) or 64"},
    // The largest vector kept on recursive doubling: at P=4 on ucx:shm Rabenseifner's
    // smaller copies and reductions win from 64 KiB (docs/performance.md).
    {.name = "PCOLL_TRACE", .kind = Kind::user, .type = Type::text, .fallback = "",
     .doc = "directory where every rank writes a Chrome trace of each handle's rounds "
            "(docs/observability.md); unset: no trace"},
    {.name = "PCOLL_RD_MAX_BYTES", .kind = Kind::user, .type = Type::unsigned_int, .fallback = "32768",
     .min = 0, .max = uint64_t{1} << 40,
     .doc = "recursive doubling up to this many bytes of the vector (accumulation type), "
            "Rabenseifner above"},

    // --- set by launchers (pcollrun), or by hand for a manual multi-host job -------------
    {.name = "PCOLL_RANK", .kind = Kind::launcher, .type = Type::unsigned_int, .fallback = "",
     .min = 0, .max = UINT32_MAX, .doc = "this process's rank, below PCOLL_SIZE"},
    {.name = "PCOLL_SIZE", .kind = Kind::launcher, .type = Type::unsigned_int, .fallback = "",
     .min = 1, .max = uint64_t{1} << 20, .doc = "number of ranks in the job"},
    {.name = "PCOLL_ROOT", .kind = Kind::launcher, .type = Type::text, .fallback = "",
     .doc = "host:port of the rendezvous store (rank 0 hosts it in a manual job)"},
    {.name = "PCOLL_JOB_KEY", .kind = Kind::launcher, .type = Type::text, .fallback = "",
     .doc = "secret every rank of the job shares; the store refuses ranks with another key"},
    {.name = "PCOLL_LAUNCHER", .kind = Kind::launcher, .type = Type::choice, .fallback = "manual",
     .choices = kLauncherChoices,
     .doc = "who hosts the store: pcollrun (set by pcollrun for its ranks) or manual (rank 0)"},
    {.name = "PCOLL_LOCAL_RANK", .kind = Kind::launcher, .type = Type::unsigned_int, .fallback = "",
     .min = 0, .max = UINT32_MAX,
     .doc = "rank among this host's ranks, for the application (pcoll does not read it)"},
    {.name = "PCOLL_LOCAL_SIZE", .kind = Kind::launcher, .type = Type::unsigned_int, .fallback = "",
     .min = 1, .max = uint64_t{1} << 20, .doc = "ranks on this host, for the application (pcoll does not read it)"},

    // --- set by the tests (tests/meson.build) for the programs they start ----------------
    {.name = "PCOLL_TEST_EXPECT_PROVIDER", .kind = Kind::test, .type = Type::text, .fallback = "",
     .doc = "collective_check: fail unless the communicator's provider (pcoll_comm_provider) is this"},
    {.name = "PCOLL_TEST_HOST_NAMES", .kind = Kind::test, .type = Type::text, .fallback = "",
     .doc = "comma-separated host names, rank r taking the r-th: ranks of one machine route their "
            "peers as if on those hosts"},
    {.name = "PCOLL_TEST_OFI_CQ_DATA_SIZE", .kind = Kind::test, .type = Type::unsigned_int, .fallback = "",
     .min = 4, .max = 8,
     .doc = "ofi: carry only this many bytes of remote CQ data (4: as verbs and EFA do), below what "
            "fi_getinfo reports"},
    {.name = "PCOLL_TEST_UCX_UNMAPPED_RANK", .kind = Kind::test, .type = Type::unsigned_int, .fallback = "",
     .min = 0, .max = UINT32_MAX,
     .doc = "ucx: this rank and its peers map none of each other's memory (as if it ran on another "
            "host), so notifications between them take the network path instead of the mailbox"},
    {.name = "PCOLL_TEST_OFI_WITHOUT_ATOMICS", .kind = Kind::test, .type = Type::unsigned_int, .fallback = "0",
     .min = 0, .max = 1,
     .doc = "ofi: 1 opens the provider without FI_ATOMIC, as on a NIC that has none (remote_atomics false)"},
    {.name = "PCOLL_TEST_ATOMICS", .kind = Kind::test, .type = Type::unsigned_int, .fallback = "10000",
     .min = 1, .max = 100000000, .doc = "transport_conformance: atomics per rank in the contention cases"},
    {.name = "PCOLL_TEST_ABSENT_RANK", .kind = Kind::test, .type = Type::unsigned_int, .fallback = "",
     .min = 0, .max = UINT32_MAX, .doc = "bootstrap_rank: this rank exits before joining the bootstrap"},
    {.name = "PCOLL_TEST_RANK_PROGRAM", .kind = Kind::test, .type = Type::text, .fallback = "",
     .doc = "path of tests/helpers/bootstrap_rank"},
    {.name = "PCOLL_TEST_PCOLLRUN", .kind = Kind::test, .type = Type::text, .fallback = "",
     .doc = "path of pcollrun"},
    {.name = "PCOLL_TEST_INFO", .kind = Kind::test, .type = Type::text, .fallback = "",
     .doc = "path of pcoll_info (cluster suite)"},
    {.name = "PCOLL_TEST_COLLECTIVE_CHECK", .kind = Kind::test, .type = Type::text, .fallback = "",
     .doc = "path of collective_check (cluster suite)"},
    {.name = "PCOLL_TEST_HOST_MEMORY_BYTES", .kind = Kind::test, .type = Type::unsigned_int, .fallback = "",
     .min = 0, .max = UINT64_MAX,
     .doc = "the memory this host reports as available to a handle's allocation (instead of "
            "MemAvailable and the cgroup limit)"},
    {.name = "PCOLL_TEST_FLOOD", .kind = Kind::test, .type = Type::unsigned_int, .fallback = "",
     .min = 1, .max = 1000000,
     .doc = "test_store_hostile: connections each flood opens (scripts/test-store-hostile.sh); unset: the CI sizes"},
    {.name = "PCOLL_TEST_CLOCK_SKEW_MS", .kind = Kind::test, .type = Type::unsigned_int, .fallback = "0",
     .min = 0, .max = 86400000, .doc = "added to this rank's trace clock, to test the clock offsets"},
    {.name = "PCOLL_TEST_IMBALANCE", .kind = Kind::test, .type = Type::text, .fallback = "",
     .doc = "path of imbalance_check (cluster suite)"},
    {.name = "PCOLL_TEST_CONFORMANCE", .kind = Kind::test, .type = Type::text, .fallback = "",
     .doc = "path of transport_conformance (cluster suite)"},
});

namespace detail {

consteval const Setting* find_constant(std::string_view name) {
  for (const Setting& s : kTable)
    if (s.name == name) return &s;
  throw "this name is not in the settings table (lib/support/include/support/settings.hpp)";
}

consteval uint64_t parse_constant(std::string_view digits) {
  uint64_t value = 0;
  for (const char c : digits) {
    if (c < '0' || c > '9') throw "not a decimal default";
    value = value * 10 + static_cast<uint64_t>(c - '0');
  }
  return value;
}

}  // namespace detail

// A name of the table, looked up at compile time: a name the table lacks, or a reader of
// the wrong type (an unsigned read of a choice), does not compile. Readers take it by
// value, so call sites read `settings::get_unsigned("PCOLL_SPIN_US")`.
template <Type... readable>
class Name {
 public:
  consteval Name(const char* name) : setting_(detail::find_constant(name)) {
    if (sizeof...(readable) != 0 && ((setting_->type != readable) && ...))
      throw "this reader does not read settings of this type";
  }
  constexpr const Setting& setting() const { return *setting_; }

 private:
  const Setting* setting_;
};

// The table's default of an unsigned setting, as a constant.
consteval uint64_t unsigned_default(Name<Type::unsigned_int> name) {
  const Setting& s = name.setting();
  if (s.fallback.empty()) throw "this setting has no default";
  return detail::parse_constant(s.fallback);
}

// --- readers. An unset or empty variable takes the table's default. A malformed value is
// an Error(invalid_argument) naming the variable and what it accepts.

// The entry itself (its range, its doc).
inline const Setting& entry(Name<> name) { return name.setting(); }

// The environment's text, unchecked, without default: nullopt when unset or empty. For
// presence tests and for readers that check the text themselves.
std::optional<std::string> raw(Name<> name);

// The value, or the default; a setting without default that is unset is an error naming it.
uint64_t get_unsigned(Name<Type::unsigned_int> name);

// `text` checked against the setting's range, for readers that hold the text already.
uint64_t parse_unsigned(Name<Type::unsigned_int> name, const std::string& text);

// One of the choices (or, for choice_or_unsigned, a number in range, as its digits).
std::string get_choice(Name<Type::choice, Type::choice_or_unsigned> name);

// The text, or the default; nullopt when neither.
std::optional<std::string> get_text(Name<Type::text> name);

// --- the table as data, for pcoll_info and for the check of unknown names.

std::span<const Setting> all();
const Setting* find(std::string_view name);
const char* kind_name(Kind kind);
std::string type_text(const Setting& setting);  // "integer 1..86400000", "auto|always|never", ...

// One setting as it stands in this process's environment.
struct Effective {
  std::string value;         // what the reader would use; empty when unset without default
  bool from_environment;     // else the table's default
  std::string error;         // why the environment's value would be refused; empty when valid
};
Effective effective(const Setting& setting);

// PCOLL_* names in this environment that the table lacks, each with the closest known name
// (edit distance).
struct Unknown {
  std::string name;
  std::string closest;
  size_t distance;  // edits from `name` to `closest`
};
std::vector<Unknown> unknown_variables();

// Logs one warning per unknown PCOLL_* name, once per process (communicator setup).
void warn_unknown_variables();

}  // namespace pcoll::settings
