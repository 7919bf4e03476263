// The MuJoCo model loader behind dice's envs: a file gives the built-in
// hopper, a missing or malformed file is named with MuJoCo's message, a
// model of another shape is refused, and a step that runs out of
// constraint rows is an error rather than other physics.

#include "dice/core/errc.hpp"
#include "dice/env/vector_env.hpp"
#include "dice/mujoco/hopper.hpp"
#include "dice/mujoco/model.hpp"

#include "hopper_support.hpp"
#include <gtest/gtest.h>
#include <mujoco/mujoco.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

using namespace dice::envs;

namespace {

using namespace dice::test;

// A fresh folder under the build dir's tmp area, removed by the test.
struct temp_dir {
  std::string path;
  temp_dir() {
    std::string tmpl = std::string{DICE_BINARY_DIR} + "/hopper_test_XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (mkdtemp(buf.data()) == nullptr)
      throw std::runtime_error("mkdtemp failed");
    path = buf.data();
  }
  ~temp_dir() {
    std::string cmd = "rm -rf '" + path + "'";
    [[maybe_unused]] auto rc = std::system(cmd.c_str());
  }
  std::string write(const std::string& name, const std::string& text) const {
    auto file = path + "/" + name;
    std::ofstream out{file};
    out << text;
    return file;
  }
};

TEST(MujocoModel, AFileGivesTheSameHopperAsTheBuiltInText) {
  temp_dir dir;
  auto file = dir.write("hopper.xml", hopper_xml());
  auto m = load_mujoco_model(file);
  ASSERT_TRUE(m) << dice::render(m.error());
  hopper a{0};
  hopper b{*m, 0};
  EXPECT_NE(a.model().get(), b.model().get());
  EXPECT_TRUE(bit_equal(trajectory(a, 3, 200), trajectory(b, 3, 200)));
}

TEST(MujocoModel, AMissingFileIsNamedWithMujocosMessage) {
  temp_dir dir;
  auto file = dir.path + "/no_such_model.xml";
  auto m = load_mujoco_model(file);
  ASSERT_FALSE(m);
  EXPECT_EQ(m.error(), dice::errc::invalid_config);
  auto text = dice::render(m.error());
  EXPECT_NE(text.find("cannot load MuJoCo model " + file + ": "),
            std::string::npos)
    << text;
  EXPECT_EQ(text.find("(no message)"), std::string::npos) << text;
}

TEST(MujocoModel, AMalformedFileIsNamedWithMujocosMessage) {
  temp_dir dir;
  auto file = dir.write("broken.xml", "<mujoco><worldbody><body>\n");
  auto m = load_mujoco_model(file);
  ASSERT_FALSE(m);
  EXPECT_EQ(m.error(), dice::errc::invalid_config);
  auto text = dice::render(m.error());
  EXPECT_NE(text.find("cannot load MuJoCo model " + file + ": "),
            std::string::npos)
    << text;
  EXPECT_EQ(text.find("(no message)"), std::string::npos) << text;
  // MJCF that parses as XML but not as a model: MuJoCo names the problem.
  auto bad = dir.write("bad_attr.xml",
                       "<mujoco><worldbody><geom "
                       "type=\"sphere\" size=\"x\"/>"
                       "</worldbody></mujoco>");
  auto m2 = load_mujoco_model(bad);
  ASSERT_FALSE(m2);
  EXPECT_NE(dice::render(m2.error()).find(bad), std::string::npos);
  auto m3 = parse_mujoco_model("<mujoco><nonsense/></mujoco>", "inline.xml");
  ASSERT_FALSE(m3);
  EXPECT_NE(dice::render(m3.error())
              .find("cannot load MuJoCo model "
                    "inline.xml: "),
            std::string::npos)
    << dice::render(m3.error());
}

TEST(MujocoModel, AModelOfAnotherShapeIsRefusedByTheHopper) {
  auto m = parse_mujoco_model("<mujoco><worldbody><body><joint "
                              "type=\"hinge\"/><geom size=\"0.1\"/></body>"
                              "</worldbody></mujoco>",
                              "pendulum.xml");
  ASSERT_TRUE(m) << dice::render(m.error());
  EXPECT_THROW(hopper(*m, 0), std::invalid_argument);
  auto v = dice::vector_env::make(1, [&](std::size_t) {
    return std::make_unique<hopper>(*m, 0);
  });
  ASSERT_FALSE(v);
  EXPECT_EQ(v.error(), dice::errc::invalid_config);
}

TEST(MujocoModel, AStepThatRunsOutOfConstraintRowsIsAnError) {
  // The same hopper with room for 2 constraint rows: the first contact
  // with the floor does not fit, and the env says so instead of stepping
  // other physics.
  auto xml = hopper_xml();
  auto at = xml.find("njmax=\"100\"");
  ASSERT_NE(at, std::string::npos);
  xml.replace(at, 11, "njmax=\"2\"");
  auto m = parse_mujoco_model(xml, "small.xml");
  ASSERT_TRUE(m) << dice::render(m.error());
  hopper env{*m, 0};
  float obs[obs_dim], a[3] = {0, 0, 0};
  env.reset(0, obs);
  try {
    for (int t = 0; t < 1000; ++t)
      if (env.step(act(a), obs).terminated)
        env.reset(std::nullopt, obs);
    FAIL() << "no step ran out of rows";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string{e.what()}.find("Hopper-v4: more contacts or "
                                         "constraints"),
              std::string::npos)
      << e.what();
    EXPECT_NE(std::string{e.what()}.find("njmax 2"), std::string::npos)
      << e.what();
  }
}

} // namespace
