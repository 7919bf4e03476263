// dice::to_snapshot / dice::load_snapshot / dice::torch_model on a small MLP
// with a BatchNorm1d (whose buffers include the int64 num_batches_tracked).

#include "dice/core/errc.hpp"
#include "dice/messages/model_snapshot.hpp"
#include "dice/torch/model.hpp"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace {

struct mlp_impl : torch::nn::Module {
  mlp_impl()
    : fc1(register_module("fc1", torch::nn::Linear(4, 16))),
      bn(register_module("bn", torch::nn::BatchNorm1d(16))),
      fc2(register_module("fc2", torch::nn::Linear(16, 2))) {
    // nop
  }

  torch::Tensor forward(torch::Tensor x) {
    return fc2(torch::relu(bn(fc1(x))));
  }

  torch::nn::Linear fc1;
  torch::nn::BatchNorm1d bn;
  torch::nn::Linear fc2;
};

TORCH_MODULE_IMPL(mlp, mlp_impl);

/// A model with its own weights and BatchNorm statistics (a few training
/// forward passes move running_mean/var and num_batches_tracked).
mlp make_model(std::uint64_t seed, int train_steps) {
  torch::manual_seed(seed);
  mlp m;
  m->train();
  torch::NoGradGuard no_grad;
  for (int i = 0; i < train_steps; ++i)
    m->forward(torch::randn({8, 4}));
  m->eval();
  return m;
}

/// Every parameter and buffer, cloned (a deep copy to compare against).
std::map<std::string, torch::Tensor> tensors_of(const torch::nn::Module& m) {
  std::map<std::string, torch::Tensor> result;
  for (auto& kvp : m.named_parameters(true))
    result.emplace(kvp.key(), kvp.value().detach().clone());
  for (auto& kvp : m.named_buffers(true))
    result.emplace(kvp.key(), kvp.value().detach().clone());
  return result;
}

void expect_tensors_equal(const std::map<std::string, torch::Tensor>& xs,
                          const std::map<std::string, torch::Tensor>& ys) {
  ASSERT_EQ(xs.size(), ys.size());
  for (auto& [name, x] : xs) {
    auto i = ys.find(name);
    ASSERT_NE(i, ys.end()) << name;
    EXPECT_EQ(x.scalar_type(), i->second.scalar_type()) << name;
    EXPECT_TRUE(torch::equal(x, i->second)) << name;
  }
}

/// Rebuilds `x` through a snapshot_builder, letting `edit` change (or drop,
/// by returning false) each entry first; `extra` entries are appended.
template <class Edit>
dice::model_snapshot rebuild(const dice::model_snapshot& x, Edit edit,
                             std::vector<dice::tensor_entry> extra = {}) {
  dice::snapshot_builder b;
  for (auto e : x.index) {
    auto src = x.data.data() + e.offset;
    if (edit(e))
      b.add(e.name, e.type, e.shape, src, e.nbytes);
  }
  std::vector<std::uint8_t> zeros(1024);
  for (auto& e : extra)
    b.add(e.name, e.type, e.shape, zeros.data(), e.nbytes);
  return b.build(x.sender, x.incarnation, x.version, x.send_time_ns);
}

class Model : public ::testing::Test {
 protected:
  mlp a = make_model(1, 3);
  mlp b = make_model(2, 5);

  /// Loading `bad` into `b` must fail with model_mismatch, saying `why`, and
  /// leave every tensor of `b` as it was.
  void expect_mismatch(const dice::model_snapshot& bad, const char* what,
                       const std::string& why) {
    ASSERT_FALSE(dice::validate(bad)) << what << ": snapshot is malformed";
    auto before = tensors_of(*b);
    auto err = dice::load_snapshot(*b, bad);
    EXPECT_TRUE(dice::is(err, dice::errc::model_mismatch))
      << what << ": " << dice::render(err);
    EXPECT_NE(dice::render(err).find(why), std::string::npos)
      << what << ": " << dice::render(err);
    expect_tensors_equal(before, tensors_of(*b));
  }
};

TEST_F(Model, SnapshotIndexesEveryParameterAndBuffer) {
  auto snap = dice::to_snapshot(*a);
  ASSERT_TRUE(snap) << dice::render(snap.error());
  EXPECT_FALSE(dice::validate(*snap));
  auto expected = tensors_of(*a);
  ASSERT_EQ(snap->index.size(), expected.size());
  std::map<std::string, dice::tensor_entry> by_name;
  for (auto& e : snap->index)
    by_name.emplace(e.name, e);
  ASSERT_EQ(by_name.count("bn.num_batches_tracked"), 1u);
  auto& steps = by_name["bn.num_batches_tracked"];
  EXPECT_EQ(steps.type, dice::dtype::int64);
  EXPECT_TRUE(steps.shape.empty());
  std::int64_t n = 0;
  std::memcpy(&n, snap->data.data() + steps.offset, sizeof(n));
  EXPECT_EQ(n, 3);
  EXPECT_EQ(by_name["fc1.weight"].shape, (std::vector<std::int64_t>{16, 4}));
  EXPECT_EQ(by_name["fc1.weight"].type, dice::dtype::float32);
}

TEST_F(Model, RoundTripIsExact) {
  auto snap = dice::to_snapshot(*a);
  ASSERT_TRUE(snap) << dice::render(snap.error());
  auto before = tensors_of(*b);
  auto err = dice::load_snapshot(*b, *snap);
  ASSERT_FALSE(err) << dice::render(err);
  auto loaded = tensors_of(*b);
  expect_tensors_equal(tensors_of(*a), loaded);
  EXPECT_EQ(loaded["bn.num_batches_tracked"].item<std::int64_t>(), 3);
  EXPECT_EQ(loaded["bn.num_batches_tracked"].scalar_type(), torch::kInt64);
  // The load really changed something (the models started out different).
  EXPECT_FALSE(torch::equal(before["fc1.weight"], loaded["fc1.weight"]));
  // A second snapshot of the loaded model is byte-identical.
  auto again = dice::to_snapshot(*b);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->index, snap->index);
  EXPECT_TRUE(again->data == snap->data);
}

TEST_F(Model, MissingNameIsAMismatch) {
  auto snap = dice::to_snapshot(*a);
  ASSERT_TRUE(snap);
  expect_mismatch(rebuild(*snap,
                          [](dice::tensor_entry& e) {
                            return e.name != "bn.running_var";
                          }),
                  "missing name", "8 tensors, the model 9");
}

TEST_F(Model, ExtraNameIsAMismatch) {
  auto snap = dice::to_snapshot(*a);
  ASSERT_TRUE(snap);
  expect_mismatch(
    rebuild(
      *snap,
      [](dice::tensor_entry&) {
        return true;
      },
      {dice::tensor_entry{"fc3.weight", dice::dtype::float32, {2, 2}, 0, 16}}),
    "extra name", "'fc3.weight' the model does not have");
}

TEST_F(Model, RenamedTensorIsAMismatch) {
  auto snap = dice::to_snapshot(*a);
  ASSERT_TRUE(snap);
  expect_mismatch(rebuild(*snap,
                          [](dice::tensor_entry& e) {
                            if (e.name == "fc2.bias")
                              e.name = "fc2.offset";
                            return true;
                          }),
                  "renamed tensor", "'fc2.offset' the model does not have");
}

TEST_F(Model, WrongShapeIsAMismatch) {
  auto snap = dice::to_snapshot(*a);
  ASSERT_TRUE(snap);
  // Same number of bytes, transposed shape: only the shape check catches it.
  expect_mismatch(rebuild(*snap,
                          [](dice::tensor_entry& e) {
                            if (e.name == "fc1.weight")
                              e.shape = {4, 16};
                            return true;
                          }),
                  "wrong shape", "has shape [4, 16] in the snapshot, [16, 4]");
}

TEST_F(Model, WrongDtypeIsAMismatch) {
  auto snap = dice::to_snapshot(*a);
  ASSERT_TRUE(snap);
  // int64 -> float64 keeps the byte count: only the dtype check catches it.
  expect_mismatch(rebuild(*snap,
                          [](dice::tensor_entry& e) {
                            if (e.name == "bn.num_batches_tracked")
                              e.type = dice::dtype::float64;
                            return true;
                          }),
                  "wrong dtype",
                  "is float64 in the snapshot, Long in the model");
}

TEST_F(Model, MalformedSnapshotIsRefusedAndChangesNothing) {
  auto snap = dice::to_snapshot(*a);
  ASSERT_TRUE(snap);
  auto bad = *snap;
  bad.index.back().offset = bad.data.size();
  bad.index.back().nbytes += 1;
  auto before = tensors_of(*b);
  auto err = dice::load_snapshot(*b, bad);
  EXPECT_TRUE(dice::is(err, dice::errc::malformed_input)) << dice::render(err);
  expect_tensors_equal(before, tensors_of(*b));
}

TEST_F(Model, PredictionsFollowTheLoadedSnapshot) {
  torch::manual_seed(7);
  auto x = torch::randn({5, 4});
  torch::NoGradGuard no_grad;
  auto ya = a->forward(x);
  auto yb = b->forward(x);
  ASSERT_FALSE(torch::allclose(ya, yb));
  auto snap = dice::to_snapshot(*a);
  ASSERT_TRUE(snap);
  ASSERT_FALSE(dice::load_snapshot(*b, *snap));
  auto yb2 = b->forward(x);
  EXPECT_FALSE(torch::allclose(yb, yb2));
  EXPECT_TRUE(torch::equal(ya, yb2));
}

// A load is an in-place write as far as autograd knows: a backward through
// a graph that saved the old weights refuses, as after copy_.
TEST_F(Model, ALoadBetweenForwardAndBackwardIsCaughtByAutograd) {
  auto snap = dice::to_snapshot(*a);
  ASSERT_TRUE(snap);
  auto x = torch::randn({5, 4}, torch::requires_grad());
  b->train();
  auto y = b->forward(x).sum();
  auto version = b->fc2->weight._version();
  ASSERT_FALSE(dice::load_snapshot(*b, *snap));
  EXPECT_GT(b->fc2->weight._version(), version);
  EXPECT_THROW(y.backward(), c10::Error);
  // A forward after the load trains as usual.
  auto y2 = b->forward(x).sum();
  EXPECT_NO_THROW(y2.backward());
}

TEST_F(Model, TorchModelPortSnapshotsAndLoads) {
  auto pa = dice::model_port_of(a.ptr());
  auto pb = dice::model_port_of(b.ptr());
  EXPECT_EQ(pa->module(), a.ptr());
  auto snap = pa->snapshot();
  ASSERT_TRUE(snap) << dice::render(snap.error());
  {
    auto guard = pb->lock(); // what a training thread holds during a step
    EXPECT_TRUE(guard.owns_lock());
  }
  ASSERT_FALSE(pb->load(*snap));
  expect_tensors_equal(tensors_of(*a), tensors_of(*b));
  // A mismatching snapshot through the port: refused, nothing written.
  auto other = std::make_shared<torch::nn::LinearImpl>(4, 16);
  auto wrong = dice::model_port_of(other)->snapshot();
  ASSERT_TRUE(wrong);
  auto before = tensors_of(*b);
  EXPECT_TRUE(dice::is(pb->load(*wrong), dice::errc::model_mismatch));
  expect_tensors_equal(before, tensors_of(*b));
}

} // namespace
