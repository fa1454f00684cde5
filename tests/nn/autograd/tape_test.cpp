#include "nn/autograd/tape.h"

#include "nn/autograd/arena.h"
#include "nn/init/init.h"
#include "nn/ops/conv2d.h"
#include "nn/ops/elementwise.h"
#include "nn/ops/linear.h"
#include "nn/ops/reshape.h"
#include "tests/testing/op_harness.h"

namespace tg {
namespace {

TEST(Tape, AccumulatesThroughSharedInputs) {
  // y = x*x + x  ->  dy/dx = 2x + 1; x feeds three uses.
  Tensor x = Tensor::from_vector<float>({1, -2, 3}, {3});
  x.set_requires_grad(true);
  Tensor y = add(mul(x, x), x);
  EXPECT_EQ(tape_size(), 2u);
  backward(y);
  EXPECT_EQ(tape_size(), 0u) << "backward consumes the tape";
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{3, -3, 7}));
}

TEST(Tape, LeafReadyFiresOnceAfterTheLastContribution) {
  // a feeds the first and the last op, b only the last: b's gradient is final after the last op
  // runs (it runs first backward), a's only after the first op's backward has added to it.
  Tensor a = Tensor::from_vector<float>({1, 2}, {2});
  Tensor b = Tensor::from_vector<float>({3, 4}, {2});
  Tensor unused = Tensor::from_vector<float>({5}, {1});
  for (Tensor* t : {&a, &b, &unused}) t->set_requires_grad(true);
  Tensor h = mul(a, a);          // node 0: reads a
  Tensor y = add(mul(h, b), a);  // node 1: reads h, b; node 2: reads the product, a
  std::vector<std::pair<std::string, std::vector<float>>> seen;
  backward(y, Tensor(), [&](const AutogradMeta& leaf) {
    const std::string who = &leaf == a.autograd_meta().get()   ? "a"
                            : &leaf == b.autograd_meta().get() ? "b"
                                                               : "?";
    seen.emplace_back(who, leaf.grad.to_vector<float>());
  });
  ASSERT_EQ(seen.size(), 2u) << "a leaf no op reads is never reported";
  EXPECT_EQ(seen[0].first, "b");
  EXPECT_EQ(seen[0].second, (std::vector<float>{1, 4}));  // dy/db = a^2
  EXPECT_EQ(seen[1].first, "a");
  EXPECT_EQ(seen[1].second, (std::vector<float>{7, 17}));  // dy/da = 2ab + 1, complete
}

TEST(Tape, NoGradGuardRecordsNothing) {
  Tensor x = Tensor::from_vector<float>({1, 2}, {2});
  x.set_requires_grad(true);
  {
    NoGradGuard g;
    Tensor y = mul(x, x);
    EXPECT_FALSE(y.requires_grad());
  }
  EXPECT_EQ(tape_size(), 0u);
  EXPECT_TRUE(grad_enabled());
  EXPECT_THROW(backward(mul_scalar(Tensor::zeros({2}), 2.f)), Error);
}

TEST(Tape, DeepChainIsIterative) {
  // 20000 nodes: a recursive backward would risk the stack; the tape loop does not.
  Tensor x = Tensor::from_vector<float>({1}, {1});
  x.set_requires_grad(true);
  Tensor y = x;
  for (int i = 0; i < 20000; ++i) y = add_scalar(y, 1e-4f);
  backward(y);
  EXPECT_EQ(x.grad().item<float>(), 1.0f);
}

TEST(Tape, GradientOnlyFlowsToRequiringInputs) {
  Tensor a = Tensor::from_vector<float>({2}, {1});
  Tensor b = Tensor::from_vector<float>({5}, {1});
  a.set_requires_grad(true);
  backward(mul(a, b));
  EXPECT_EQ(a.grad().item<float>(), 5.0f);
  EXPECT_FALSE(b.grad().defined());
}

TEST(Arena, ContiguousParamsAndGrads) {
  ParamArena arena;
  arena.add("w", {3, 4}, [](Tensor& t) { init::constant_(t, 0.5f); });
  arena.add("b", {4}, [](Tensor& t) { init::constant_(t, -1.0f); });
  EXPECT_THROW(arena.add("w", {1}, nullptr), Error);
  arena.allocate(Device::cpu());
  EXPECT_THROW(arena.add("late", {1}, nullptr), Error);
  EXPECT_EQ(arena.total_numel(), 16);
  const Tensor& w = arena.param("w");
  const Tensor& b = arena.param("b");
  EXPECT_TRUE(w.shares_storage_with(arena.params()));
  EXPECT_EQ(w.offset(), 0);
  EXPECT_EQ(b.offset(), 12);
  EXPECT_TRUE(w.grad().shares_storage_with(arena.grads()));
  auto flat = arena.params().to_vector<float>();
  EXPECT_EQ(flat[0], 0.5f);
  EXPECT_EQ(flat[12], -1.0f);

  // Two backward passes accumulate into the arena's gradient buffer; zero_grad clears it.
  Tensor x = Tensor::full({3, 4}, 2.0);
  for (int pass = 0; pass < 2; ++pass) backward(mul(w, x));
  for (float g : w.grad().to_vector<float>()) EXPECT_EQ(g, 4.0f);
  auto gflat = arena.grads().to_vector<float>();
  EXPECT_EQ(gflat[0], 4.0f);
  EXPECT_EQ(gflat[12], 0.0f);
  arena.zero_grad();
  for (float g : arena.grads().to_vector<float>()) EXPECT_EQ(g, 0.0f);
  EXPECT_THROW(arena.param("nope"), Error);
}

// The per-worker path of train/step.cpp: gradients zeroed lazily (convolution and linear weights
// written in place, the rest copied, unreached ones zeroed by settle_grads) and bound to another
// buffer give the bits of zero_grad() + backward() in the arena's own buffer, whatever the
// buffers held before, and leave the arena's own buffer alone while bound elsewhere.
TEST(Arena, LazyZeroAndBoundGradsGiveTheEagerBits) {
  ParamArena arena;
  uint64_t stream = 0;
  auto init = [&stream](Tensor& t) { init::uniform_(t, -0.5f, 0.5f, 7, stream++); };
  arena.add("conv.w", {4, 2, 3, 3}, init);
  arena.add("conv.b", {4}, init);
  arena.add("fc.w", {100, 5}, init);
  arena.add("fc.b", {5}, init);
  arena.add("unused", {3}, init);
  arena.allocate(Device::cpu());
  Tensor x = Tensor::empty({2, 2, 5, 5});
  init::uniform_(x, -1.0f, 1.0f, 8, 0);
  Tensor seed = Tensor::empty({2, 5});
  init::uniform_(seed, -1.0f, 1.0f, 8, 1);
  auto fill_own = [&](double v) {
    Tensor g = arena.grads();
    g.fill_(v);
  };
  auto pass = [&] {
    Tensor h = conv2d(x, arena.param("conv.w"), arena.param("conv.b"));
    Tensor y = linear(reshape(h, {2, 100}), arena.param("fc.w"), arena.param("fc.b"));
    backward(y, seed);
  };
  fill_own(7.0);
  arena.zero_grad();
  pass();
  const std::vector<float> eager = arena.grads().to_vector<float>();
  EXPECT_EQ(eager[arena.entries()[4].offset], 0.0f) << "the unused parameter's gradient";

  fill_own(7.0);  // stale values the lazy pass must not add to
  arena.zero_grad_lazily();
  pass();
  EXPECT_EQ(arena.entries()[4].param.autograd_meta()->grad_pending_zero, true);
  arena.settle_grads();
  EXPECT_EQ(arena.grads().to_vector<float>(), eager);

  Tensor other = Tensor::full({arena.total_numel()}, 9.0);
  fill_own(5.0);
  arena.bind_grads(other);
  EXPECT_TRUE(arena.param("fc.w").grad().shares_storage_with(other));
  arena.zero_grad_lazily();
  pass();
  arena.settle_grads();
  EXPECT_EQ(other.to_vector<float>(), eager);
  for (float g : arena.grads().to_vector<float>()) ASSERT_EQ(g, 5.0f);
  arena.bind_grads(Tensor());
  EXPECT_TRUE(arena.param("fc.w").grad().shares_storage_with(arena.grads()));
  EXPECT_THROW(arena.bind_grads(Tensor::zeros({arena.total_numel() - 1})), Error);
}

}  // namespace
}  // namespace tg
