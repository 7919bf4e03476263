#include "dice/process/unique_fd.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <type_traits>
#include <utility>

namespace {

using dice::unique_fd;

// A fresh descriptor (the read end of a pipe; the write end is closed).
int open_fd() {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0)
    return -1;
  ::close(p[1]);
  return p[0];
}

// True if `fd` is not an open descriptor of this process.
bool is_closed(int fd) {
  errno = 0;
  return ::fcntl(fd, F_GETFD) == -1 && errno == EBADF;
}

static_assert(!std::is_copy_constructible_v<unique_fd>);
static_assert(!std::is_copy_assignable_v<unique_fd>);
static_assert(std::is_nothrow_move_constructible_v<unique_fd>);
static_assert(std::is_nothrow_move_assignable_v<unique_fd>);

TEST(UniqueFd, OwnsNothingByDefault) {
  unique_fd fd;
  EXPECT_FALSE(fd);
  EXPECT_EQ(fd.get(), -1);
}

TEST(UniqueFd, ClosesOnDestruction) {
  auto raw = open_fd();
  ASSERT_GE(raw, 0);
  {
    unique_fd fd{raw};
    EXPECT_TRUE(fd);
    EXPECT_EQ(fd.get(), raw);
    EXPECT_FALSE(is_closed(raw));
  }
  EXPECT_TRUE(is_closed(raw));
}

TEST(UniqueFd, MoveTransfersOwnership) {
  auto raw = open_fd();
  ASSERT_GE(raw, 0);
  unique_fd b;
  {
    unique_fd a{raw};
    unique_fd moved{std::move(a)};
    EXPECT_FALSE(a); // NOLINT(bugprone-use-after-move): checks the move
    EXPECT_EQ(moved.get(), raw);
    b = std::move(moved);
    EXPECT_FALSE(moved); // NOLINT(bugprone-use-after-move)
  }
  // Both moved-from owners are gone; the fd lives on in `b`.
  EXPECT_FALSE(is_closed(raw));
  EXPECT_EQ(b.get(), raw);
  b = unique_fd{};
  EXPECT_TRUE(is_closed(raw));
}

TEST(UniqueFd, MoveAssignmentClosesTheOldFd) {
  auto first = open_fd();
  auto second = open_fd();
  ASSERT_GE(first, 0);
  ASSERT_GE(second, 0);
  unique_fd a{first};
  unique_fd b{second};
  a = std::move(b);
  EXPECT_TRUE(is_closed(first));
  EXPECT_FALSE(is_closed(second));
  EXPECT_EQ(a.get(), second);
}

TEST(UniqueFd, ReleaseGivesUpOwnership) {
  auto raw = open_fd();
  ASSERT_GE(raw, 0);
  {
    unique_fd fd{raw};
    EXPECT_EQ(fd.release(), raw);
    EXPECT_FALSE(fd);
    EXPECT_EQ(fd.get(), -1);
  }
  EXPECT_FALSE(is_closed(raw));
  ::close(raw); // the caller's now
  EXPECT_TRUE(is_closed(raw));
}

TEST(UniqueFd, ResetClosesTheOldOne) {
  auto first = open_fd();
  auto second = open_fd();
  ASSERT_GE(first, 0);
  ASSERT_GE(second, 0);
  unique_fd fd{first};
  fd.reset(second);
  EXPECT_TRUE(is_closed(first));
  EXPECT_FALSE(is_closed(second));
  EXPECT_EQ(fd.get(), second);
  fd.reset();
  EXPECT_TRUE(is_closed(second));
  EXPECT_FALSE(fd);
}

TEST(UniqueFd, ClosingKeepsErrno) {
  // A failed call's errno survives the cleanup of an owner on its way out.
  auto raw = open_fd();
  ASSERT_GE(raw, 0);
  {
    unique_fd fd{raw};
    errno = ENOENT;
  }
  EXPECT_EQ(errno, ENOENT);
  EXPECT_TRUE(is_closed(raw));
}

} // namespace
