// The catalog: every component's settings rows (each declared in its component's
// *_settings.hpp), in the order `pcoll_info --config` prints them, plus the rows only the
// test programs read. The library warns about PCOLL_* names the catalog lacks, pcollrun
// checks every row before it starts its ranks, and README's table is checked against it
// (tests/unit/readme_settings.py). Only constant data: a program that includes it links
// nothing for it.
#pragma once

#include <array>
#include <span>

#include <bootstrap/bootstrap_settings.hpp>
#include <collectives/collectives_settings.hpp>
#include <fault/fault_settings.hpp>
#include <ofi/ofi_settings.hpp>
#include <registry/registry_settings.hpp>
#include <support/pcoll_config.h>
#include <support/settings.hpp>
#include <support/support_settings.hpp>
#include <transport/transport_settings.hpp>
#if PCOLL_HAVE_UCX
#include <ucx/ucx_settings.hpp>
#endif

namespace pcoll {
namespace settings {

// Set by tests/meson.build for the test programs and helpers, which read them; the library
// only needs to know them so as not to warn.
inline constexpr auto kTestProgramRows = std::to_array<Setting>({
    {.name = "PCOLL_TEST_EXPECT_PROVIDER", .kind = Kind::test, .type = Type::text, .fallback = "",
     .doc = "collective_check: fail unless the communicator's provider (pcoll_comm_provider) is this"},
    {.name = "PCOLL_TEST_EXPECT_PLAN", .kind = Kind::test, .type = Type::text, .fallback = "",
     .doc = "collective_check: fail unless a small handle's reduction plan (pcoll_allreduce_stats) is this"},
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
    {.name = "PCOLL_TEST_FLOOD", .kind = Kind::test, .type = Type::unsigned_int, .fallback = "",
     .min = 1, .max = 1000000,
     .doc = "test_store_hostile: connections each flood opens (scripts/test-store-hostile.sh); unset: the CI sizes"},
    {.name = "PCOLL_TEST_IMBALANCE", .kind = Kind::test, .type = Type::text, .fallback = "",
     .doc = "path of imbalance_check (cluster suite)"},
    {.name = "PCOLL_TEST_CONFORMANCE", .kind = Kind::test, .type = Type::text, .fallback = "",
     .doc = "path of transport_conformance (cluster suite)"},
});

inline constexpr Component kCatalog[] = {
    {"registry", kRegistryRows},
    {"fault", kFaultRows},
    {"support", kSupportRows},
    {"bootstrap", kBootstrapRows},
    {"collectives", kCollectivesRows},
    {"transport", kTransportRows},
    {"ofi", kOfiRows},
#if PCOLL_HAVE_UCX
    {"ucx", kUcxRows},
#endif
    {"tests", kTestProgramRows},
};
static_assert(detail::names_are_unique(kCatalog), "a PCOLL_* name is declared by two components");

constexpr std::span<const Component> catalog() { return kCatalog; }

}  // namespace settings

using TestSettings = settings::Reader<settings::kTestProgramRows>;

}  // namespace pcoll
