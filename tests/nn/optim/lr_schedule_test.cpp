// Learning-rate policies (nn/optim/lr_schedule.h): exact values at chosen steps (the schedule
// is evaluated in double, so the expected values are the same closed forms to ~1 ulp), the
// staircase and boundary edges, and every validation error.
#include "nn/optim/lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "tests/testing/errors.h"

namespace tg {
namespace {

using tg::testing::expect_error_with;

// The same double formula evaluated in another order: a few ulp.
constexpr double kRtol = 1e-14;

void expect_lr(const LrSchedule& s, int64_t step, double expected) {
  EXPECT_NEAR(s(step), expected, kRtol * std::abs(expected)) << "step " << step;
}

TEST(LrSchedule, Constant) {
  LrScheduleOptions o;
  o.policy = LrPolicy::constant;
  o.lr = 0.05;
  const LrSchedule s(o);
  for (const int64_t t : {0, 1, 1000, 1000000000}) EXPECT_EQ(s(t), 0.05);
}

// polynomial power 0.5 from 0.01 over T = 10000, end 0 (the reference LeNet/CIFAR recipe).
TEST(LrSchedule, PolynomialSqrt) {
  LrScheduleOptions o;
  o.policy = LrPolicy::polynomial;
  o.lr = 0.01;
  o.power = 0.5;
  o.decay_steps = 10000;
  const LrSchedule s(o);
  EXPECT_EQ(s(0), 0.01);
  expect_lr(s, 2500, 0.01 * std::sqrt(0.75));
  expect_lr(s, 5000, 0.01 * std::sqrt(0.5));
  // 1 - 9999/10000 cancels to 1e-4 (1 + 4.6e-12): an absolute bound.
  EXPECT_NEAR(s(9999), 0.01 * 0.01, 1e-15);
  EXPECT_EQ(s(10000), 0.0);
  EXPECT_EQ(s(12000), 0.0) << "cycle=False: the step is clipped at T";
}

TEST(LrSchedule, PolynomialWithEndAndPower) {
  LrScheduleOptions o;
  o.policy = LrPolicy::polynomial;
  o.lr = 0.1;
  o.end_lr = 0.001;
  o.power = 2.0;
  o.decay_steps = 100;
  const LrSchedule s(o);
  expect_lr(s, 0, 0.1);
  expect_lr(s, 30, (0.1 - 0.001) * 0.7 * 0.7 + 0.001);
  expect_lr(s, 100, 0.001);
  expect_lr(s, 101, 0.001);
  expect_lr(s, 1000000, 0.001);
}

TEST(LrSchedule, ExponentialStaircase) {
  LrScheduleOptions o;
  o.policy = LrPolicy::exponential;
  o.lr = 0.1;
  o.decay_rate = 0.1;
  o.decay_steps = 350;
  o.staircase = true;
  const LrSchedule s(o);
  EXPECT_EQ(s(0), 0.1);
  EXPECT_EQ(s(349), 0.1) << "last step of the first stair";
  expect_lr(s, 350, 0.01);
  expect_lr(s, 699, 0.01);
  expect_lr(s, 700, 0.001);
  expect_lr(s, 1049, 0.001);
  expect_lr(s, 1050, 1e-4);
}

TEST(LrSchedule, ExponentialContinuous) {
  LrScheduleOptions o;
  o.policy = LrPolicy::exponential;
  o.lr = 0.2;
  o.decay_rate = 0.5;
  o.decay_steps = 100;
  o.staircase = false;
  const LrSchedule s(o);
  EXPECT_EQ(s(0), 0.2);
  expect_lr(s, 50, 0.2 * std::sqrt(0.5));
  expect_lr(s, 100, 0.1);
  expect_lr(s, 349, 0.2 * std::pow(0.5, 3.49));
}

// lr0 * rate^(number of boundaries <= step): the new rate applies at the boundary step itself.
TEST(LrSchedule, StepBoundaries) {
  LrScheduleOptions o;
  o.policy = LrPolicy::step;
  o.lr = 0.1;
  o.decay_rate = 0.1;
  o.boundaries = {1000, 3000, 3001};
  const LrSchedule s(o);
  EXPECT_EQ(s(0), 0.1);
  EXPECT_EQ(s(999), 0.1);
  expect_lr(s, 1000, 0.01);
  expect_lr(s, 2999, 0.01);
  expect_lr(s, 3000, 0.001);
  expect_lr(s, 3001, 1e-4);
  expect_lr(s, 1000000, 1e-4);

  o.boundaries = {0};
  o.decay_rate = 0.5;
  expect_lr(LrSchedule(o), 0, 0.05);
}

TEST(LrSchedule, NegativeStepThrows) {
  LrScheduleOptions o;
  o.decay_steps = 100;
  const LrSchedule s(o);
  expect_error_with([&] { s(-1); }, {"lr_schedule: step must be >= 0, got -1"});
}

// The defaults are the paper's LeNet recipe, the config's: polynomial decay with power 0.5 from
// 0.01 to 0; the decay period is the run's to set.
TEST(LrSchedule, DefaultsAreTheLeNetRecipe) {
  LrScheduleOptions o;
  EXPECT_EQ(o.policy, LrPolicy::polynomial);
  EXPECT_EQ(o.lr, 0.01);
  EXPECT_EQ(o.end_lr, 0.0);
  EXPECT_EQ(o.power, 0.5);
  expect_error_with([&] { LrSchedule s(o); },
                    {"lr_schedule: decay_steps must be > 0 for policy 'polynomial', got 0"});
  o.decay_steps = 100;
  expect_lr(LrSchedule(o), 75, 0.01 * std::sqrt(0.25));
}

TEST(LrSchedule, ValidationErrors) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  auto build = [](LrScheduleOptions o) { LrSchedule s(std::move(o)); };

  expect_error_with([&] { parse_enum(kLrPolicies, "cosine", "train.lr_policy"); },
                    {"train.lr_policy: unknown value 'cosine' (known: constant, polynomial, "
                     "exponential, step)"});

  for (const auto& entry : kLrPolicies) {
    const std::string p(entry.name);
    SCOPED_TRACE(p);
    LrScheduleOptions q;
    q.policy = entry.value;
    q.decay_steps = 10;
    q.boundaries = {5};
    for (const double lr : {-0.1, nan, inf}) {
      q.lr = lr;
      expect_error_with(
          [&] { build(q); },
          {std::string("lr_schedule: lr must be finite and >= 0 for policy '") + p + "'"});
    }
    q.lr = 0.0;
    EXPECT_NO_THROW(build(q)) << "lr = 0 is allowed";
  }

  LrScheduleOptions o;
  o.policy = LrPolicy::polynomial;
  o.decay_steps = 0;
  expect_error_with([&] { build(o); },
                    {"lr_schedule: decay_steps must be > 0 for policy 'polynomial', got 0"});
  o.decay_steps = -5;
  expect_error_with([&] { build(o); },
                    {"lr_schedule: decay_steps must be > 0 for policy 'polynomial', got -5"});
  o.decay_steps = 100;
  o.end_lr = -1.0;
  expect_error_with(
      [&] { build(o); },
      {"lr_schedule: end_lr must be finite and >= 0 for policy 'polynomial', got -1"});
  o.end_lr = 0.0;
  for (const double pw : {0.0, -0.5, nan}) {
    o.power = pw;
    expect_error_with([&] { build(o); },
                      {"lr_schedule: power must be finite and > 0 for policy 'polynomial'"});
  }

  o = LrScheduleOptions{};
  o.policy = LrPolicy::exponential;
  expect_error_with([&] { build(o); },
                    {"lr_schedule: decay_steps must be > 0 for policy 'exponential', got 0"});
  o.decay_steps = 10;
  for (const double r : {0.0, -0.1, inf}) {
    o.decay_rate = r;
    expect_error_with([&] { build(o); },
                      {"lr_schedule: decay_rate must be finite and > 0 for policy 'exponential'"});
  }

  o = LrScheduleOptions{};
  o.policy = LrPolicy::step;
  expect_error_with([&] { build(o); },
                    {"lr_schedule: boundaries must not be empty for policy 'step'"});
  o.boundaries = {-1, 5};
  expect_error_with([&] { build(o); },
                    {"lr_schedule: boundaries[0] must be >= 0 for policy 'step', got -1"});
  o.boundaries = {5, 10, 10};
  expect_error_with([&] { build(o); },
                    {"lr_schedule: boundaries must be strictly increasing for policy 'step', got "
                     "boundaries[1] = 10 and boundaries[2] = 10"});
  o.boundaries = {5, 3};
  expect_error_with([&] { build(o); }, {"boundaries[0] = 5 and boundaries[1] = 3"});
  o.boundaries = {5};
  o.decay_rate = 0.0;
  expect_error_with([&] { build(o); },
                    {"lr_schedule: decay_rate must be finite and > 0 for policy 'step', got 0"});

  // Fields of other policies are not checked.
  o = LrScheduleOptions{};
  o.policy = LrPolicy::constant;
  o.decay_steps = -3;
  o.power = -1.0;
  o.decay_rate = -2.0;
  o.boundaries = {3, 1};
  EXPECT_NO_THROW(build(o));
}

}  // namespace
}  // namespace tg
