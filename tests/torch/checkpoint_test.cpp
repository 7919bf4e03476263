// Checkpoints PyTorch reads and writes: a file written by dice is loaded by
// Python's torch.load (Debian's python3-torch) and compared tensor by
// tensor; a file written by torch.save loads in dice.

#include "dice/core/errc.hpp"
#include "dice/torch/checkpoint.hpp"
#include "dice/torch/model.hpp"

#include "support/child_process.hpp"
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

namespace {

namespace fs = std::filesystem;

// Debian's interpreter (python3-torch installs there), not whatever a
// version manager put first on PATH.
std::string python() {
  return fs::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
}

// `import torch` takes seconds; a minute is the deadline for either.
constexpr std::chrono::seconds python_deadline{60};

bool python_has_torch() {
  dice::test::child_process p{{python(), "-c", "import torch"}};
  return p.wait_exit(python_deadline) == 0;
}

std::string run_python(const std::string& script) {
  auto file = fs::temp_directory_path()
    / ("dice-ckpt-" + std::to_string(::getpid()) + ".py");
  std::ofstream{file} << script;
  dice::test::child_process p{{python(), file.string()}};
  auto rc = p.wait_exit(python_deadline);
  auto out = p.text();
  if (rc != 0)
    out = "FAILED: " + out;
  fs::remove(file);
  return out;
}

class Checkpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = fs::temp_directory_path()
      / ("dice-ckpt-test-" + std::to_string(::getpid()));
    fs::create_directories(dir);
  }
  void TearDown() override {
    fs::remove_all(dir);
  }
  fs::path dir;
};

TEST_F(Checkpoint, RoundTripInDice) {
  torch::manual_seed(3);
  torch::nn::Linear net{4, 3};
  auto x = dice::to_snapshot(*net);
  ASSERT_TRUE(x);
  auto path = (dir / "net.pt").string();
  ASSERT_FALSE(dice::save_pytorch_checkpoint(*x, path));
  auto y = dice::load_pytorch_checkpoint(path);
  ASSERT_TRUE(y) << dice::render(y.error());
  EXPECT_EQ(y->index.size(), x->index.size());
  for (std::size_t i = 0; i < x->index.size(); ++i) {
    auto& a = x->index[i];
    auto j = std::find_if(y->index.begin(), y->index.end(), [&](auto& e) {
      return e.name == a.name;
    });
    ASSERT_NE(j, y->index.end()) << a.name;
    EXPECT_EQ(j->shape, a.shape);
    EXPECT_EQ(j->type, a.type);
    EXPECT_EQ(0,
              std::memcmp(y->data.data() + j->offset, x->data.data() + a.offset,
                          a.nbytes));
  }
}

TEST_F(Checkpoint, MissingAndForeignFilesAreErrors) {
  auto missing = dice::load_pytorch_checkpoint((dir / "nope.pt").string());
  ASSERT_FALSE(missing);
  EXPECT_TRUE(dice::is(missing.error(), dice::errc::storage_missing));
  std::ofstream{dir / "junk.pt"} << "not a checkpoint";
  auto junk = dice::load_pytorch_checkpoint((dir / "junk.pt").string());
  ASSERT_FALSE(junk);
  EXPECT_TRUE(dice::is(junk.error(), dice::errc::malformed_input));
}

// A checkpoint another user owns, or that group or others may write, is
// not loaded (another local user's weights would become the model).
TEST_F(Checkpoint, PlantedCheckpointsAreRefused) {
  torch::nn::Linear net{4, 3};
  auto x = dice::to_snapshot(*net);
  ASSERT_TRUE(x);
  auto path = (dir / "latest.pt").string();
  ASSERT_FALSE(dice::save_pytorch_checkpoint(*x, path));
  ASSERT_TRUE(dice::load_pytorch_checkpoint(path));
  fs::permissions(path, fs::perms::others_write, fs::perm_options::add);
  auto writable = dice::load_pytorch_checkpoint(path);
  ASSERT_FALSE(writable) << "an others-writable checkpoint was loaded";
  EXPECT_NE(dice::render(writable.error()).find("group or others may have"),
            std::string::npos)
    << dice::render(writable.error());
  fs::permissions(path, fs::perms::others_write, fs::perm_options::remove);
  if (::geteuid() != 0)
    GTEST_SKIP() << "giving a file to another user needs root (CI is)";
  ASSERT_EQ(::chown(path.c_str(), 65534, 65534), 0); // nobody
  auto foreign = dice::load_pytorch_checkpoint(path);
  ASSERT_FALSE(foreign) << "another user's checkpoint was loaded";
  EXPECT_NE(dice::render(foreign.error()).find("belongs to uid 65534"),
            std::string::npos)
    << dice::render(foreign.error());
}

TEST_F(Checkpoint, PythonTorchLoadReadsWhatDiceWrote) {
  if (!python_has_torch())
    GTEST_SKIP() << "python3-torch is not installed (apt-get install -y "
                    "python3-torch)";
  std::vector<float> w(12);
  for (int i = 0; i < 12; ++i)
    w[i] = 0.25f * i - 1.f;
  std::vector<std::int64_t> n{7, -3, 11};
  dice::snapshot_builder b;
  b.add("fc.weight", dice::dtype::float32, {3, 4}, w.data(), 12 * 4);
  b.add("steps", dice::dtype::int64, {3}, n.data(), 3 * 8);
  auto x = b.build(0, 0, 0, 0);
  auto path = (dir / "dice.pt").string();
  ASSERT_FALSE(dice::save_pytorch_checkpoint(x, path));
  auto out = run_python(
    "import torch\n"
    "d = torch.load('"
    + path
    + "')\n"
      "assert isinstance(d, dict), type(d)\n"
      "assert sorted(d.keys()) == ['fc.weight', 'steps'], d.keys()\n"
      "w = torch.arange(12, dtype=torch.float32).reshape(3, 4) * 0.25 - 1\n"
      "assert d['fc.weight'].dtype == torch.float32\n"
      "assert torch.equal(d['fc.weight'], w), d['fc.weight']\n"
      "assert torch.equal(d['steps'], torch.tensor([7, -3, 11])), d['steps']\n"
      "print('OK')\n");
  EXPECT_EQ(out, "OK\n");
}

TEST_F(Checkpoint, DiceReadsWhatPythonTorchSaveWrote) {
  if (!python_has_torch())
    GTEST_SKIP() << "python3-torch is not installed (apt-get install -y "
                    "python3-torch)";
  auto path = (dir / "py.pt").string();
  auto out = run_python(
    "import torch\n"
    "torch.save({'w': torch.arange(6, dtype=torch.float32).reshape(2, 3),\n"
    "            'b': torch.tensor([1.5, -2.0], dtype=torch.float64)}, '"
    + path
    + "')\n"
      "print('OK')\n");
  ASSERT_EQ(out, "OK\n");
  auto x = dice::load_pytorch_checkpoint(path);
  ASSERT_TRUE(x) << dice::render(x.error());
  ASSERT_EQ(x->index.size(), 2u);
  for (auto& e : x->index) {
    if (e.name == "w") {
      EXPECT_EQ(e.type, dice::dtype::float32);
      EXPECT_EQ(e.shape, (std::vector<std::int64_t>{2, 3}));
      auto p = reinterpret_cast<const float*>(x->data.data() + e.offset);
      for (int i = 0; i < 6; ++i)
        EXPECT_EQ(p[i], static_cast<float>(i));
    } else {
      EXPECT_EQ(e.name, "b");
      EXPECT_EQ(e.type, dice::dtype::float64);
      auto p = reinterpret_cast<const double*>(x->data.data() + e.offset);
      EXPECT_EQ(p[0], 1.5);
      EXPECT_EQ(p[1], -2.0);
    }
  }
}

} // namespace
