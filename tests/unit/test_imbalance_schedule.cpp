// pcoll_imbalance's delay schedules are part of what docs/performance.md reports: they must
// stay the same from one version to the next. perf/ carries its own copy of the draw (it
// uses only the public API), so this checks that the copy is the library's hash and that
// the schedules are the ones recorded when the copy was made.
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include <support/hash.hpp>
#include "imbalance_model.hpp"
#include "perf_hash.hpp"

using pcoll::perf::ImbalanceModel;

TEST_CASE("the schedule's draw is the library's splitmix64 hash") {
  for (uint64_t seed : {uint64_t{0}, uint64_t{42}, ~uint64_t{0}})
    for (uint64_t step = 0; step < 64; ++step)
      for (uint64_t stream = 0; stream < 16; ++stream)
        REQUIRE(pcoll::perf::draw(seed, step, stream) == pcoll::hash3(seed, step, stream));
  for (uint64_t x = 0; x < 1000; ++x)
    REQUIRE(pcoll::perf::splitmix64(x * 0x1234567) == pcoll::splitmix64(x * 0x1234567));
}

TEST_CASE("the paper schedule delays the same two drawn ranks per step as before") {
  ImbalanceModel model;
  model.kind = ImbalanceModel::Kind::paper;
  model.compute_ms = 20;
  model.delay_ms = 16;
  model.seed = 42;
  const std::vector<std::vector<double>> recorded = {
      {20, 36, 20, 36, 20}, {20, 20, 36, 36, 20}, {20, 20, 20, 36, 36}, {20, 20, 36, 36, 20},
      {20, 20, 20, 36, 36}, {20, 20, 20, 20, 36}, {20, 36, 20, 36, 20}, {36, 20, 36, 20, 20},
  };
  CHECK(pcoll::perf::make_schedule(model, 8, 5) == recorded);
}

TEST_CASE("the lognormal schedule draws the same times as before") {
  ImbalanceModel model;
  model.kind = ImbalanceModel::Kind::lognormal;
  model.compute_ms = 20;
  model.sigma = 0.5;
  model.seed = 7;
  const std::vector<std::vector<double>> recorded = {
      {25.585020012686517, 17.022763191260434, 28.00878660128221},
      {7.5560430864113863, 13.392305592800342, 24.881004368275285},
      {11.570880747407521, 19.70213617129048, 10.368611725189893},
  };
  const auto schedule = pcoll::perf::make_schedule(model, 3, 3);
  REQUIRE(schedule.size() == recorded.size());
  for (size_t s = 0; s < recorded.size(); ++s)
    for (size_t r = 0; r < recorded[s].size(); ++r)
      CHECK(schedule[s][r] == doctest::Approx(recorded[s][r]).epsilon(1e-12));
}
